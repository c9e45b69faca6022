package cli

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/redisstore"
)

// envoyproxy/ratelimit's environment, its defaults included, as the flags
// it stands for; what sluice does not offer is refused by name.
func TestEnvoyEnv(t *testing.T) {
	defaults := map[string]string{
		"http": "0.0.0.0:8080", "grpc": "0.0.0.0:8081", "config": "/srv/runtime_data/current/config",
		"log-level": "warn", "log-format": "text", "store": "unix:///var/run/nutcracker/ratelimit.sock",
	}
	with := func(kv map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range defaults {
			m[k] = v
		}
		for k, v := range kv {
			m[k] = v
		}
		return m
	}
	// With CONFIG_TYPE=GRPC_XDS_SOTW the rules come from the xDS server,
	// not the runtime directory.
	xds := func(kv map[string]string) map[string]string {
		m := with(map[string]string{"xds-server": "localhost:18000", "xds-node-id": "default", "xds-backoff-initial": "10s", "xds-backoff-max": "60s"})
		delete(m, "config")
		for k, v := range kv {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want map[string]string
	}{
		{"defaults", nil, defaults},
		{"xDS defaults", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, xds(nil)},
		{"Envoy Gateway's xDS", map[string]string{
			"CONFIG_TYPE": "grpc_xds_sotw", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
			"CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,rack=b", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-team:edge",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway",
			"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "5s", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608",
			"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		}, xds(map[string]string{
			"xds-server": "envoy-gateway:18001", "xds-node-id": "envoy-ratelimit", "xds-node-metadata": "zone=a,rack=b", "xds-headers": "x-team:edge",
			"xds-tls": "true", "xds-tls-cert": "/certs/tls.crt", "xds-tls-key": "/certs/tls.key", "xds-tls-ca": "/certs/ca.crt", "xds-tls-server-name": "envoy-gateway",
			"xds-backoff-initial": "1s", "xds-backoff-max": "5s", "xds-max-message-bytes": "8388608", "xds-force-start": "true",
		})},
		{"envoy's Prometheus statistics", map[string]string{"USE_PROMETHEUS": "true", "NEAR_LIMIT_RATIO": "0.9", "PROMETHEUS_ADDR": ":9091"},
			with(map[string]string{"envoy-stats": "true", "near-limit-ratio": "0.9"})},
		{"xDS TLS settings without USE_TLS", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt"}, xds(nil)},
		{"a deployment's", map[string]string{
			"HOST": "127.0.0.1", "PORT": "9080", "GRPC_PORT": "9081", "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit",
			"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.svc:6379", "REDIS_AUTH": "s3cret", "CACHE_KEY_PREFIX": "rl:",
			"LOG_LEVEL": "DEBUG", "LOG_FORMAT": "json", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset",
			"SHADOW_MODE": "false", "QUOTA_MODE": "1", "RESPONSE_DYNAMIC_METADATA": "true", "GRPC_MAX_CONNECTION_AGE": "30m", "MERGE_DOMAIN_CONFIG": "true",
			"USE_STATSD": "false", "REDIS_POOL_SIZE": "20", "LOCAL_CACHE_SIZE_IN_BYTES": "1000000",
		}, with(map[string]string{
			"http": "127.0.0.1:9080", "grpc": "0.0.0.0:9081", "config": "/data/ratelimit/config",
			"store": "redis://:s3cret@redis.svc:6379", "prefix": "rl:", "log-level": "debug", "log-format": "json",
			"response-headers": "envoy", "reset-header": "X-Reset", "quota-mode": "true", "response-dynamic-metadata": "true", "merge-domain-config": "true",
			"grpc-max-connection-age": "30m",
		})},
		{"a sidecar's", map[string]string{"GRPC_UDS": "/run/rl.sock", "REDIS_AUTH": "app:p@ss", "RUNTIME_APPDIRECTORY": "rules", "LOG_LEVEL": "warning"},
			with(map[string]string{"grpc": "unix:/run/rl.sock", "store": "unix://app:p%40ss@/var/run/nutcracker/ratelimit.sock", "config": "/srv/runtime_data/current/rules"})},
		{"TLS", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6380", "REDIS_TLS": "true",
			"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_SERVER_TLS_KEY": "/k.pem", "GRPC_CLIENT_TLS_CACERT": "/ca.pem", "GRPC_CLIENT_TLS_SAN": "envoy.mesh"},
			with(map[string]string{"store": "rediss://r:6380", "grpc-tls-cert": "/c.pem", "grpc-tls-key": "/k.pem", "grpc-tls-client-ca": "/ca.pem", "grpc-tls-client-san": "envoy.mesh"})},
		{"a cluster", map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:7000,b:7001", "REDIS_AUTH": "u:p"},
			with(map[string]string{"store": "redis-cluster://u:p@a:7000,b:7001"})},
		{"a TLS cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:7000", "REDIS_TLS": "true",
			"REDIS_TLS_CACERT": "/ca.pem", "REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			with(map[string]string{"store": "rediss-cluster://a:7000", "store-tls-ca": "/ca.pem", "store-tls-cert": "/c.pem", "store-tls-key": "/k.pem",
				"store-tls-skip-hostname-verification": "true"})},
		{"a per-second Redis", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "main:6379", "REDIS_AUTH": "m",
			"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "sec:6379", "REDIS_PERSECOND_AUTH": "s", "REDIS_PERSECOND_TLS": "true"},
			with(map[string]string{"store": "redis://:m@main:6379", "store-per-second": "rediss://:s@sec:6379"})},
		{"a per-second Redis by default", map[string]string{"REDIS_PERSECOND": "true"},
			with(map[string]string{"store-per-second": "unix:///var/run/nutcracker/ratelimitpersecond.sock"})},
		{"a TLS sentinel", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "m,127.0.0.1:26379", "REDIS_TLS": "true"},
			with(map[string]string{"store": "rediss-sentinel://127.0.0.1:26379/m"})},
		{"a sentinel", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_AUTH": "pw", "REDIS_SENTINEL_AUTH": "su:s&p"},
			with(map[string]string{"store": "redis-sentinel://:pw@s1:26379,s2:26379/mymaster?sentinel_password=s%26p&sentinel_username=su"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := envoyEnv(func(k string) string { return c.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %v\nwant %v", got, c.want)
			}
		})
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"NEAR_LIMIT_RATIO": "most"}, `NEAR_LIMIT_RATIO="most" is not a number`},
		{map[string]string{"USE_PROMETHEUS": "yes please"}, `USE_PROMETHEUS="yes please" is not a boolean`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, "CONFIG_TYPE=GRPC_XDS_DELTA: want FILE or GRPC_XDS_SOTW"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "a minute"}, `XDS_CLIENT_BACKOFF_MAX_INTERVAL="a minute" is not a duration`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "FORCE_START_WITHOUT_INITIAL_CONFIG": "sure"}, `FORCE_START_WITHOUT_INITIAL_CONFIG="sure" is not a boolean`},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE=memcache"},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TYPE": "cluster"}, "REDIS_TYPE=cluster wants REDIS_SOCKET_TYPE=tcp (the REDIS_PERSECOND_… settings)"},
		{map[string]string{"MERGE_DOMAIN_CONFIG": "often"}, `MERGE_DOMAIN_CONFIG="often" is not a boolean`},
		{map[string]string{"REDIS_TYPE": "gossip"}, "REDIS_TYPE=gossip: sluice offers single, cluster and sentinel"},
		{map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:26379"}, "REDIS_URL=MASTER,HOST:PORT"},
		{map[string]string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "perhaps"}, `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION="perhaps" is not a boolean`},
		{map[string]string{"REDIS_TYPE": "cluster"}, "wants REDIS_SOCKET_TYPE=tcp"},
		{map[string]string{"REDIS_TLS": "true"}, "REDIS_TLS over a Unix socket"},
		{map[string]string{"REDIS_SOCKET_TYPE": "udp"}, "want tcp or unix"},
		{map[string]string{"QUOTA_MODE": "maybe"}, `QUOTA_MODE="maybe" is not a boolean`},
		{map[string]string{"LOG_LEVEL": "loud"}, `LOG_LEVEL="loud"`},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "1 day"}, "not a duration"},
	} {
		if _, err := envoyEnv(func(k string) string { return c.env[k] }); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.env, err, c.want)
		}
	}
}

// --store takes credentials for a cluster and a Unix socket, never prints a
// password, and opens clients that never send a command again once it may
// have reached Redis: their connections report a broken connection as
// redisstore.ErrReplyLost, which go-redis does not retry (redisstore's
// TestLostReply shows what that does).
func TestStoreSpecs(t *testing.T) {
	c, err := redisClient("redis-cluster://app:p%40ss@127.0.0.1:7000,127.0.0.1:7001", storeTLS{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.(*redis.ClusterClient).Options()
	if o.Username != "app" || o.Password != "p@ss" || len(o.Addrs) != 2 || !o.ContextTimeoutEnabled || o.NewClient == nil {
		t.Errorf("cluster options: user %q password %q addrs %v, context timeouts %v, node constructor %v", o.Username, o.Password, o.Addrs, o.ContextTimeoutEnabled, o.NewClient != nil)
	} else {
		node := o.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		checkSendOnce(t, "a cluster node", node.Options().Dialer)
		_ = node.Close()
	}
	r, err := redisClient("redis://127.0.0.1:6379/0", storeTLS{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ro := r.(*redis.Client).Options(); !ro.ContextTimeoutEnabled {
		t.Errorf("redis:// options: context timeouts %v, want true", ro.ContextTimeoutEnabled)
	} else {
		checkSendOnce(t, "redis://", ro.Dialer)
	}
	f, err := failoverOptions("x", "app:p%40ss@127.0.0.1:26379,127.0.0.1:26380/my%20master?sentinel_password=sp&sentinel_username=su", nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.MasterName != "my master" || f.Username != "app" || f.Password != "p@ss" || !reflect.DeepEqual(f.SentinelAddrs, []string{"127.0.0.1:26379", "127.0.0.1:26380"}) ||
		f.SentinelUsername != "su" || f.SentinelPassword != "sp" || !f.ContextTimeoutEnabled {
		t.Errorf("sentinel options: %+v", f)
	}
	checkSendOnce(t, "redis-sentinel://", f.Dialer)
	s, err := redisClient("redis-sentinel://127.0.0.1:26379/m", storeTLS{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	for spec, want := range map[string]string{
		"redis-sentinel://127.0.0.1:26379":                              "/MASTER",
		"redis-sentinel://127.0.0.1:26379/m/0":                          "/MASTER",
		"redis-sentinel://127.0.0.1/m":                                  `"127.0.0.1" is not HOST:PORT`,
		"redis-sentinel://u:s3cret@127.0.0.1:26379/m?db=1":              `unknown parameter "db"`,
		"redis-sentinel://127.0.0.1:26379/m?sentinel_password=s3cret&x": `unknown parameter "x"`,
	} {
		if _, err := redisClient(spec, storeTLS{}); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v, want an error with %q (and no password)", spec, err, want)
		}
	}
	u, err := redisClient("unix://:pw@/run/redis.sock", storeTLS{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if uo := u.(*redis.Client).Options(); uo.Network != "unix" || uo.Addr != "/run/redis.sock" || uo.Password != "pw" {
		t.Errorf("unix options: %s %s %q", uo.Network, uo.Addr, uo.Password)
	}
	if _, err := redisClient("redis-cluster://u:s3cret@nohost", storeTLS{}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a bad cluster address: %v (the password must not show)", err)
	}
}

// checkSendOnce dials, with dial, a loopback server that closes every
// connection at once, and checks that reading from it fails with
// redisstore.ErrReplyLost.
func checkSendOnce(t *testing.T, name string, dial func(context.Context, string, string) (net.Conn, error)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	if dial == nil {
		t.Errorf("%s: no dialer", name)
		return
	}
	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer c.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, redisstore.ErrReplyLost) {
		t.Errorf("%s: a broken connection reads %v, want redisstore.ErrReplyLost", name, err)
	}
}
