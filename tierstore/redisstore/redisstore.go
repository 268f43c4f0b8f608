package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/redis/go-redis/v9"
)

// Options configures a Store.
type Options struct {
	// Addrs are the server's address (host:port), or with Cluster the
	// addresses of some of the cluster's nodes. At least one.
	Addrs []string
	// Cluster says that Addrs are nodes of a Redis Cluster.
	Cluster bool
	// Username and Password authenticate (Redis 6 ACL, or the legacy
	// requirepass with Password alone); empty means none.
	Username, Password string
	// TLS, when not nil, makes every connection use TLS with this
	// configuration.
	TLS *tls.Config
	// Fingerprint names the deployment (tierstore.Fingerprint).
	Fingerprint uint64
	// Prefix starts every key; empty means "kvt".
	Prefix string
	// TTL, when positive, makes Redis forget a unit that long after it
	// was written; 0 leaves eviction to maxmemory.
	TTL time.Duration
	// PoolSize is the connections per server; 0 means the client's
	// default (10 per CPU).
	PoolSize int
	// DialTimeout bounds connecting; 0 means 2 seconds. Reads and writes
	// are bounded by the context of each call (tierstore.Engine's
	// Timeout).
	DialTimeout time.Duration
}

// Store is a tierstore.Store on Redis (see the package documentation). It
// is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	fp     uint64
	prefix string
	ttl    time.Duration
}

var _ tierstore.Store = (*Store)(nil)

// Open returns a Store over the servers of opts. It does not connect:
// the first call does, and a server that is down then makes calls fail
// until it is up (Ping checks the servers and the credentials). It returns an error wrapping tierstore.ErrInvalidConfig
// for no address, a negative TTL, PoolSize or DialTimeout.
func Open(opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		return nil, fmt.Errorf("%w: redisstore: no address", tierstore.ErrInvalidConfig)
	}
	if opts.TTL < 0 || opts.PoolSize < 0 || opts.DialTimeout < 0 {
		return nil, fmt.Errorf("%w: redisstore: negative TTL %v, PoolSize %d or DialTimeout %v", tierstore.ErrInvalidConfig, opts.TTL, opts.PoolSize, opts.DialTimeout)
	}
	if !opts.Cluster && len(opts.Addrs) > 1 {
		return nil, fmt.Errorf("%w: redisstore: %d addresses without Cluster", tierstore.ErrInvalidConfig, len(opts.Addrs))
	}
	dial := opts.DialTimeout
	if dial == 0 {
		dial = 2 * time.Second
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "kvt"
	}
	uo := &redis.UniversalOptions{
		Addrs:         opts.Addrs,
		IsClusterMode: opts.Cluster,
		Username:      opts.Username,
		Password:      opts.Password,
		TLSConfig:     opts.TLS,
		PoolSize:      opts.PoolSize,
		DialTimeout:   dial,
		// The context of each call bounds it (the engine's timeout).
		ContextTimeoutEnabled: true,
		// A failed call fails its batch, which the cache compensates
		// (recompute, or drop): retrying would only hold the transfer.
		MaxRetries: -1,
	}
	return &Store{client: redis.NewUniversalClient(uo), fp: opts.Fingerprint, prefix: prefix, ttl: opts.TTL}, nil
}

// Ping checks that every server of the Store answers and accepts its
// credentials (every shard of a cluster), and that they may read keys
// under its prefix. Open does not connect, so a server that is down, a
// wrong password or an ACL that refuses the prefix would otherwise show
// only as failed transfers, which the cache recomputes without a word:
// call Ping at startup. It returns an error wrapping
// tierstore.ErrUnavailable that says what failed.
func (s *Store) Ping(ctx context.Context) error {
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := c.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", c.Options().Addr, err)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w: redisstore: PING: %w", tierstore.ErrUnavailable, err)
		}
	}
	// A key under the prefix, read: the credentials and the ACL's key
	// patterns are checked (PING needs no key permission).
	probe := s.prefix + ":ping"
	if err := s.client.Exists(ctx, probe).Err(); err != nil {
		return fmt.Errorf("%w: redisstore: EXISTS %s: %w", tierstore.ErrUnavailable, probe, err)
	}
	return nil
}

// Key returns the Redis key of unit k.
func (s *Store) Key(k kvcache.UnitKey) string {
	return s.prefix + ":" + tierstore.Name(s.fp, k, ':')
}

// Put implements tierstore.Store: one pipeline of SETs.
func (s *Store) Put(ctx context.Context, keys []kvcache.UnitKey, values [][]byte) error {
	if len(keys) != len(values) {
		return fmt.Errorf("%w: redisstore: %d keys, %d values", kvcache.ErrInvalidCopy, len(keys), len(values))
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			p.Set(ctx, s.Key(k), tierstore.Encode(nil, s.fp, k, values[i]), s.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: redisstore: SET of %d units: %w", tierstore.ErrUnavailable, len(keys), err)
	}
	return nil
}

// Get implements tierstore.Store: one pipeline of GETs, each read
// straight into a buffer of the value's expected size (no copy by the
// client).
func (s *Store) Get(ctx context.Context, keys []kvcache.UnitKey, dst [][]byte) error {
	if len(keys) != len(dst) {
		return fmt.Errorf("%w: redisstore: %d keys, %d buffers", kvcache.ErrInvalidCopy, len(keys), len(dst))
	}
	cmds := make([]*redis.ZeroCopyStringCmd, len(keys))
	bufs := make([][]byte, len(keys))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			// Two spare bytes let the client read the value and its
			// CRLF in one go.
			bufs[i] = make([]byte, tierstore.HeaderSize(k)+len(dst[i])+8+2)
			cmds[i] = p.GetToBuffer(ctx, s.Key(k), bufs[i])
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && !tooSmall(err) && !wrongType(err) {
		// The pipeline failed as a whole (a connection that could not
		// be made or authenticated leaves its commands without errors
		// of their own).
		return fmt.Errorf("%w: redisstore: GET of %d units: %w", tierstore.ErrUnavailable, len(keys), err)
	}
	var errs kvcache.CopyErrors
	for i, cmd := range cmds {
		cerr := cmd.Err()
		switch {
		case errors.Is(cerr, redis.Nil):
			errs = errs.Set(i, len(keys), fmt.Errorf("%w: redisstore: %s", kvcache.ErrUnitMissing, s.Key(keys[i])))
		case cerr != nil && (tooSmall(cerr) || wrongType(cerr)):
			// Another value than a unit's under its key.
			errs = errs.Set(i, len(keys), fmt.Errorf("%w: redisstore: %s: %v", kvcache.ErrUnitCorrupt, s.Key(keys[i]), cerr))
		case cerr != nil:
			return fmt.Errorf("%w: redisstore: GET of %d units, %s: %w", tierstore.ErrUnavailable, len(keys), s.Key(keys[i]), cerr)
		default:
			if err := tierstore.Decode(bufs[i][:cmd.Val()], s.fp, keys[i], dst[i]); err != nil {
				errs = errs.Set(i, len(keys), fmt.Errorf("redisstore: %s: %w", s.Key(keys[i]), err))
			}
		}
	}
	return errs.Err()
}

// tooSmall reports whether err is GetToBuffer's documented "buffer too
// small": the stored value is longer than the unit's (the client drained
// the reply, so the connection is fine).
func tooSmall(err error) bool { return strings.Contains(err.Error(), "buffer too small") }

// wrongType reports whether err is the server's reply to a GET of a key
// that holds another type than a string.
func wrongType(err error) bool { return strings.HasPrefix(err.Error(), "WRONGTYPE") }

// Contains implements tierstore.Store: one pipeline of EXISTS, one key
// each (so that a cluster answers each from its node).
func (s *Store) Contains(ctx context.Context, keys []kvcache.UnitKey) ([]bool, error) {
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Exists(ctx, s.Key(k))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: redisstore: EXISTS of %d units: %w", tierstore.ErrUnavailable, len(keys), err)
	}
	have := make([]bool, len(keys))
	for i, cmd := range cmds {
		have[i] = cmd.Val() == 1
	}
	return have, nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.client.Close() }
