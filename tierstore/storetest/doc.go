// Package storetest helps test code built on tierstore: Server plays an
// inference server over a kvcache.Cache whose third tier is a store, and
// checks every byte it reads; TestStore checks that a tierstore.Store
// keeps its contract, as testing/fstest does for file systems.
package storetest
