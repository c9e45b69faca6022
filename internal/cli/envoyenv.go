package cli

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// envoyEnv reads envoyproxy/ratelimit's environment as it reads it, its
// defaults included, into the values of sluice serve's flags (flag name →
// value), for --envoy-env: a deployment swaps the binary and keeps its
// environment. A setting sluice does not offer and that would change what
// the service answers or where it keeps its counts is an error; settings of
// envoy's statistics, pools, pipelines, timeouts and local cache are
// ignored (sluice's /metrics, its batcher and --store-timeout stand for
// them).
func envoyEnv(getenv func(string) string) (map[string]string, error) {
	get := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var err error
	boolean := func(name string) bool {
		v := getenv(name)
		if v == "" || err != nil {
			return false
		}
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			err = fmt.Errorf("envoy environment: %s=%q is not a boolean", name, v)
		}
		return b
	}
	out := map[string]string{}

	// What sluice does not offer, refused rather than silently different.
	switch {
	case !strings.EqualFold(get("CONFIG_TYPE", "FILE"), "FILE"):
		return nil, fmt.Errorf("envoy environment: CONFIG_TYPE=%s: sluice reads its configuration from files only", getenv("CONFIG_TYPE"))
	case !strings.EqualFold(get("BACKEND_TYPE", "redis"), "redis"):
		return nil, fmt.Errorf("envoy environment: BACKEND_TYPE=%s: sluice keeps its counts in Redis or in memory only", getenv("BACKEND_TYPE"))
	}

	// Listeners.
	out["http"] = net.JoinHostPort(get("HOST", "0.0.0.0"), get("PORT", "8080"))
	if uds := getenv("GRPC_UDS"); uds != "" {
		out["grpc"] = "unix:" + uds
	} else {
		out["grpc"] = net.JoinHostPort(get("GRPC_HOST", "0.0.0.0"), get("GRPC_PORT", "8081"))
	}
	for env, flag := range map[string]string{"GRPC_MAX_CONNECTION_AGE": "grpc-max-connection-age", "GRPC_MAX_CONNECTION_AGE_GRACE": "grpc-max-connection-age-grace"} {
		if v := getenv(env); v != "" {
			if _, perr := time.ParseDuration(v); perr != nil {
				return nil, fmt.Errorf("envoy environment: %s=%q is not a duration", env, v)
			}
			out[flag] = v
		}
	}
	if boolean("GRPC_SERVER_USE_TLS") {
		out["grpc-tls-cert"], out["grpc-tls-key"] = getenv("GRPC_SERVER_TLS_CERT"), getenv("GRPC_SERVER_TLS_KEY")
		if ca := getenv("GRPC_CLIENT_TLS_CACERT"); ca != "" {
			out["grpc-tls-client-ca"] = ca
			if san := getenv("GRPC_CLIENT_TLS_SAN"); san != "" { // envoy checks it only with a CA
				out["grpc-tls-client-san"] = san
			}
		}
	}

	// The configuration: envoy's runtime directory.
	out["config"] = filepath.Join(get("RUNTIME_ROOT", "/srv/runtime_data/current"), getenv("RUNTIME_SUBDIRECTORY"), get("RUNTIME_APPDIRECTORY", "config"))

	// Logging.
	switch l := strings.ToLower(get("LOG_LEVEL", "warn")); l {
	case "trace", "debug":
		out["log-level"] = "debug"
	case "info":
		out["log-level"] = "info"
	case "warn", "warning":
		out["log-level"] = "warn"
	case "error", "fatal", "panic":
		out["log-level"] = "error"
	default:
		return nil, fmt.Errorf("envoy environment: LOG_LEVEL=%q is not a level", getenv("LOG_LEVEL"))
	}
	switch f := strings.ToLower(get("LOG_FORMAT", "text")); f {
	case "text", "json":
		out["log-format"] = f
	default:
		return nil, fmt.Errorf("envoy environment: LOG_FORMAT=%q: want text or json", getenv("LOG_FORMAT"))
	}

	// Answers.
	if boolean("LIMIT_RESPONSE_HEADERS_ENABLED") {
		out["response-headers"] = "envoy"
	}
	for env, flag := range map[string]string{"LIMIT_LIMIT_HEADER": "limit-header", "LIMIT_REMAINING_HEADER": "remaining-header", "LIMIT_RESET_HEADER": "reset-header"} {
		if v := getenv(env); v != "" {
			out[flag] = v
		}
	}
	for env, flag := range map[string]string{"SHADOW_MODE": "shadow", "QUOTA_MODE": "quota-mode", "RESPONSE_DYNAMIC_METADATA": "response-dynamic-metadata", "MERGE_DOMAIN_CONFIG": "merge-domain-config"} {
		if boolean(env) {
			out[flag] = "true"
		}
	}

	// The store.
	store, serr := envoyStore(getenv, get("REDIS_TYPE", "SINGLE"), get("REDIS_SOCKET_TYPE", "unix"), get("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"), boolean("REDIS_TLS"))
	if serr != nil {
		return nil, serr
	}
	out["store"] = store
	if boolean("REDIS_PERSECOND") {
		// The per-second Redis: REDIS_PERSECOND_TYPE, _SOCKET_TYPE, _URL,
		// _TLS, _AUTH and _SENTINEL_AUTH, with envoy's defaults.
		sub := func(k string) string {
			switch k {
			case "REDIS_AUTH", "REDIS_SENTINEL_AUTH":
				return getenv(strings.Replace(k, "REDIS_", "REDIS_PERSECOND_", 1))
			}
			return getenv(k)
		}
		ps, perr := envoyStore(sub, get("REDIS_PERSECOND_TYPE", "SINGLE"), get("REDIS_PERSECOND_SOCKET_TYPE", "unix"),
			get("REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock"), boolean("REDIS_PERSECOND_TLS"))
		if perr != nil {
			return nil, fmt.Errorf("%w (the REDIS_PERSECOND_… settings)", perr)
		}
		out["store-per-second"] = ps
	}
	for env, flag := range map[string]string{"REDIS_TLS_CACERT": "store-tls-ca", "REDIS_TLS_CLIENT_CERT": "store-tls-cert", "REDIS_TLS_CLIENT_KEY": "store-tls-key"} {
		if v := getenv(env); v != "" {
			out[flag] = v
		}
	}
	if boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
		out["store-tls-skip-hostname-verification"] = "true"
	}
	if p := getenv("CACHE_KEY_PREFIX"); p != "" {
		out["prefix"] = p
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// envoyStore is --store for envoy's REDIS_TYPE, REDIS_SOCKET_TYPE,
// REDIS_URL, REDIS_TLS, REDIS_AUTH and REDIS_SENTINEL_AUTH ("password" or
// "user:password").
func envoyStore(getenv func(string) string, typ, socket, addr string, useTLS bool) (string, error) {
	var user *url.Userinfo
	if auth := getenv("REDIS_AUTH"); auth != "" {
		if name, pass, ok := strings.Cut(auth, ":"); ok {
			user = url.UserPassword(name, pass)
		} else {
			user = url.UserPassword("", auth)
		}
	}
	socket = strings.ToLower(socket)
	if socket != "tcp" && socket != "unix" {
		return "", fmt.Errorf("envoy environment: REDIS_SOCKET_TYPE=%q: want tcp or unix", socket)
	}
	switch strings.ToLower(typ) {
	case "single":
		u := url.URL{Scheme: "redis", Host: addr, User: user}
		switch {
		case socket == "unix" && useTLS:
			return "", fmt.Errorf("envoy environment: REDIS_TLS over a Unix socket is not offered")
		case socket == "unix":
			u = url.URL{Scheme: "unix", Path: addr, User: user}
		case useTLS:
			u.Scheme = "rediss"
		}
		return u.String(), nil
	case "cluster", "sentinel":
		typ = strings.ToLower(typ)
		switch {
		case socket != "tcp":
			return "", fmt.Errorf("envoy environment: REDIS_TYPE=%s wants REDIS_SOCKET_TYPE=tcp", typ)
		}
		cred := ""
		if user != nil {
			cred = user.String() + "@"
		}
		scheme := "redis-"
		if useTLS {
			scheme = "rediss-"
		}
		if typ == "cluster" {
			return scheme + "cluster://" + cred + addr, nil
		}
		// REDIS_URL: MASTER,SENTINEL,SENTINEL…
		master, sentinels, ok := strings.Cut(addr, ",")
		if !ok || master == "" || sentinels == "" {
			return "", fmt.Errorf("envoy environment: REDIS_TYPE=sentinel wants REDIS_URL=MASTER,HOST:PORT,… (the master's name, then the Sentinels)")
		}
		spec := scheme + "sentinel://" + cred + sentinels + "/" + url.PathEscape(master)
		if auth := getenv("REDIS_SENTINEL_AUTH"); auth != "" {
			q := url.Values{}
			if name, pass, ok := strings.Cut(auth, ":"); ok {
				q.Set("sentinel_username", name)
				q.Set("sentinel_password", pass)
			} else {
				q.Set("sentinel_password", auth)
			}
			spec += "?" + q.Encode()
		}
		return spec, nil
	}
	return "", fmt.Errorf("envoy environment: REDIS_TYPE=%s: sluice offers single, cluster and sentinel", typ)
}
