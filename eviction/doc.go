// Package eviction defines the Policy interface that decides which cached
// key leaves next, and the policies kvtier ships.
//
// (Overview of the algorithms: written as they land.)
package eviction
