// Package diskstore implements a tierstore.Store over a local directory:
// one file per unit, named by the unit's identity, so that a cache tier
// below the CPU can live on a local disk and outlive the process that
// wrote it.
//
// # Layout
//
// The value of unit k of the deployment with fingerprint fp (see
// tierstore.Fingerprint) is kept in the file
//
//	filepath.Join(Options.Dir, tierstore.Name(fp, k, '/'))
//
// that is Dir/<fingerprint>/<namespace>/<LoRA>/<hash>-<slice>, every
// element in hexadecimal (a "-" stands for an empty namespace or LoRA), and
// holds exactly tierstore.Encode(nil, fp, k, payload). The names are content
// addresses: two processes that store the same unit write equal bytes to
// the same file. Get serves a file only when tierstore.Decode accepts it
// for the unit asked for, so a damaged file, a file of another deployment
// or a file written for other tokens whose hash collides with the
// request's is reported as kvcache.ErrUnitCorrupt and never served.
//
// Put writes each file under a temporary name (ending in ".tmp") in the
// same directory and renames it into place, so a reader, in this process
// or another, sees a whole file or none. With Options.Sync it also flushes
// the file and its directory to stable storage.
//
// # Size bound
//
// A Store keeps an index of the unit files it knows, with their sizes, in
// least recently used order: the files it wrote or read, and the files of
// its deployment it found in Dir when it was opened (oldest modification
// first, so a restarted process knows what its predecessor stored). Put
// and Get make a file the most recently used; whenever the files it knows
// exceed Options.MaxBytes, the store removes the least recently used ones.
//
// Several processes may share a directory. Each has its own index and
// bound, and counts the files it wrote, read or found at Open; a file that
// another process removed is a miss (kvcache.ErrUnitMissing), after which
// the index forgets it.
//
// # Errors
//
// Errors begin with "diskstore: " and wrap one of tierstore.ErrInvalidConfig
// (Open), tierstore.ErrClosed (a call after Close), tierstore.ErrUnavailable
// (a failed file operation, naming the path, or a done context),
// kvcache.ErrUnitMissing and kvcache.ErrUnitCorrupt (Get), or
// kvcache.ErrInvalidCopy (keys and values of different lengths).
package diskstore
