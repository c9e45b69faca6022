package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/redisrun"
)

// CheckConfig reports whether Redis keeps the limiter's keys: it reads the
// maxmemory-policy of every server (every master of a cluster, every shard
// of a Ring) and returns an error wrapping ErrEvictingPolicy when one is not
// noeviction. A limiter key is state, not a cache entry: evicted, it
// forgets what was spent and the next decision admits as on a fresh key
// (as reported: a 5/hour limit admitted 45 of 50 under allkeys-lru and memory
// pressure). Every key the store writes has a TTL, so the volatile-*
// policies evict them too. Where CONFIG is refused (managed services, an
// ACL without it) or the client cannot send it, the error wraps
// ErrConfigUnreadable: check the policy in the provider's settings. Call it
// at start-up; it applies no failure policy.
func (s *Store) CheckConfig(ctx context.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	policies, err := redisrun.MaxmemoryPolicies(ctx, s.client)
	if errors.Is(err, redisrun.ErrNoConfigReader) {
		return fmt.Errorf("%w: %v; make sure it is noeviction", ErrConfigUnreadable, err)
	}
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("%w: CONFIG GET maxmemory-policy refused (%v); make sure it is noeviction in the service's settings", ErrConfigUnreadable, err)
		}
		return unavailable(err)
	}
	for _, p := range policies {
		if p == "" {
			return fmt.Errorf("%w: CONFIG GET maxmemory-policy returned nothing; make sure it is noeviction", ErrConfigUnreadable)
		}
		if p != "noeviction" {
			return fmt.Errorf("%w: maxmemory-policy is %s; set it to noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf), or give the limiter a Redis of its own", ErrEvictingPolicy, p)
		}
	}
	return nil
}
