// Package redisstore is a tierstore.Store on Redis or Valkey, a single
// server or a Redis Cluster, that several inference servers share: a
// prefix one of them computed and stored is loaded, not recomputed, by
// the others (see tierstore.Lookup).
//
// Each unit is one string key, "<prefix>:<fingerprint>:<namespace>:<lora>:
// <block hash>-<slice>" (tierstore.Name), whose value is the unit's bytes
// behind a header naming it, with a checksum (tierstore.Encode). The key
// carries the namespace, so tenants never address each other's values,
// and the deployment's fingerprint (model, layout and hash seed), so
// deployments sharing a Redis never read each other's bytes; the header,
// checked on every read against the request's tokens and keys, keeps a
// 64-bit hash collision from ever aliasing two blocks. Writes, reads and
// membership queries of a batch go out as one pipeline (the client splits
// a cluster's pipeline by node).
//
// Redis evicts on its own (maxmemory with an LRU or LFU policy, or the
// TTL of Options): a key that vanished is reported as
// kvcache.ErrUnitMissing, and the cache recomputes the unit. A server
// that is down, slow or failing makes the calls fail with an error
// wrapping tierstore.ErrUnavailable (after the caller's deadline, which
// tierstore.Engine sets); the client reconnects on its own, so a server
// that comes back is used again without a restart.
//
// Options pass authentication (a password, or an ACL user and password)
// and a *tls.Config (server verification, client certificates) to every
// connection the client makes; the tests run the conformance suite over
// mutual TLS against a server that accepts nothing else.
//
// The client is github.com/redis/go-redis/v9 (the README says why). It
// reports connection failures through its own logger, which writes to
// standard error unless the program sets another with redis.SetLogger;
// this package leaves that process-wide choice to the program.
package redisstore
