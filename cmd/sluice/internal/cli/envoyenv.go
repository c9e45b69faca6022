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
// envoy's statistics but USE_PROMETHEUS and NEAR_LIMIT_RATIO, its pools,
// pipelines, timeouts and local cache are ignored (sluice's /metrics, its
// batcher and --store-timeout stand for them).
func envoyEnv(getenv func(string) string) (map[string]string, error) {
	env := &envoyVars{getenv: getenv}
	out := map[string]string{}
	for _, step := range []func(*envoyVars, map[string]string) error{envoyRefused, envoyListeners, envoyXDS, envoyStatsEnv, envoyLogging, envoyAnswers, envoyStores} {
		if err := step(env, out); err != nil {
			return nil, err
		}
	}
	if env.err != nil {
		return nil, env.err
	}
	return out, nil
}

// envoyVars reads envoy's environment.
type envoyVars struct {
	getenv func(string) string
	err    error // the first boolean that is not one
}

// get is name's value, def when it is unset or empty.
func (e *envoyVars) get(name, def string) string {
	if v := e.getenv(name); v != "" {
		return v
	}
	return def
}

// boolean is name's value, false when unset; one that is not a boolean is
// e.err (envoyEnv's error once every step has run).
func (e *envoyVars) boolean(name string) bool {
	v := e.getenv(name)
	if v == "" || e.err != nil {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.err = fmt.Errorf("envoy environment: %s=%q is not a boolean", name, v)
	}
	return b
}

// envoyRefused refuses what sluice does not offer, rather than do
// something silently different.
func envoyRefused(e *envoyVars, _ map[string]string) error {
	switch {
	case !strings.EqualFold(e.get("BACKEND_TYPE", "redis"), "redis"):
		return fmt.Errorf("envoy environment: BACKEND_TYPE=%s: sluice keeps its counts in Redis or in memory only", e.getenv("BACKEND_TYPE"))
	}
	return nil
}

// envoyListeners reads where envoy listens, how, and where its
// configuration is (its runtime directory).
func envoyListeners(e *envoyVars, out map[string]string) error {
	out["http"] = net.JoinHostPort(e.get("HOST", "0.0.0.0"), e.get("PORT", "8080"))
	if uds := e.getenv("GRPC_UDS"); uds != "" {
		out["grpc"] = "unix:" + uds
	} else {
		out["grpc"] = net.JoinHostPort(e.get("GRPC_HOST", "0.0.0.0"), e.get("GRPC_PORT", "8081"))
	}
	for env, flag := range map[string]string{"GRPC_MAX_CONNECTION_AGE": "grpc-max-connection-age", "GRPC_MAX_CONNECTION_AGE_GRACE": "grpc-max-connection-age-grace"} {
		if v := e.getenv(env); v != "" {
			if _, perr := time.ParseDuration(v); perr != nil {
				return fmt.Errorf("envoy environment: %s=%q is not a duration", env, v)
			}
			out[flag] = v
		}
	}
	if e.boolean("GRPC_SERVER_USE_TLS") {
		out["grpc-tls-cert"], out["grpc-tls-key"] = e.getenv("GRPC_SERVER_TLS_CERT"), e.getenv("GRPC_SERVER_TLS_KEY")
		if ca := e.getenv("GRPC_CLIENT_TLS_CACERT"); ca != "" {
			out["grpc-tls-client-ca"] = ca
			if san := e.getenv("GRPC_CLIENT_TLS_SAN"); san != "" { // envoy checks it only with a CA
				out["grpc-tls-client-san"] = san
			}
		}
	}
	out["config"] = filepath.Join(e.get("RUNTIME_ROOT", "/srv/runtime_data/current"), e.getenv("RUNTIME_SUBDIRECTORY"), e.get("RUNTIME_APPDIRECTORY", "config"))
	return nil
}

// envoyLogging reads envoy's log level and format.
func envoyLogging(e *envoyVars, out map[string]string) error {
	switch l := strings.ToLower(e.get("LOG_LEVEL", "warn")); l {
	case "trace", "debug":
		out["log-level"] = "debug"
	case "info":
		out["log-level"] = "info"
	case "warn", "warning":
		out["log-level"] = "warn"
	case "error", "fatal", "panic":
		out["log-level"] = "error"
	default:
		return fmt.Errorf("envoy environment: LOG_LEVEL=%q is not a level", e.getenv("LOG_LEVEL"))
	}
	switch f := strings.ToLower(e.get("LOG_FORMAT", "text")); f {
	case "text", "json":
		out["log-format"] = f
	default:
		return fmt.Errorf("envoy environment: LOG_FORMAT=%q: want text or json", e.getenv("LOG_FORMAT"))
	}
	return nil
}

// envoyAnswers reads what changes envoy's answers: its headers and modes.
func envoyAnswers(e *envoyVars, out map[string]string) error {
	if e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED") {
		out["response-headers"] = "envoy"
	}
	for env, flag := range map[string]string{"LIMIT_LIMIT_HEADER": "limit-header", "LIMIT_REMAINING_HEADER": "remaining-header", "LIMIT_RESET_HEADER": "reset-header"} {
		if v := e.getenv(env); v != "" {
			out[flag] = v
		}
	}
	for env, flag := range map[string]string{"SHADOW_MODE": "shadow", "QUOTA_MODE": "quota-mode", "RESPONSE_DYNAMIC_METADATA": "response-dynamic-metadata", "MERGE_DOMAIN_CONFIG": "merge-domain-config"} {
		if e.boolean(env) {
			out[flag] = "true"
		}
	}
	return nil
}

// envoyStores reads envoy's Redis, and its per-second Redis.
func envoyStores(e *envoyVars, out map[string]string) error {
	store, err := envoyStore(e.getenv, e.get("REDIS_TYPE", "SINGLE"), e.get("REDIS_SOCKET_TYPE", "unix"), e.get("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"), e.boolean("REDIS_TLS"))
	if err != nil {
		return err
	}
	out["store"] = store
	if e.boolean("REDIS_PERSECOND") {
		// The per-second Redis: REDIS_PERSECOND_TYPE, _SOCKET_TYPE, _URL,
		// _TLS, _AUTH and _SENTINEL_AUTH, with envoy's defaults.
		sub := func(k string) string {
			switch k {
			case "REDIS_AUTH", "REDIS_SENTINEL_AUTH":
				return e.getenv(strings.Replace(k, "REDIS_", "REDIS_PERSECOND_", 1))
			}
			return e.getenv(k)
		}
		ps, err := envoyStore(sub, e.get("REDIS_PERSECOND_TYPE", "SINGLE"), e.get("REDIS_PERSECOND_SOCKET_TYPE", "unix"),
			e.get("REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock"), e.boolean("REDIS_PERSECOND_TLS"))
		if err != nil {
			return fmt.Errorf("%w (the REDIS_PERSECOND_… settings)", err)
		}
		out["store-per-second"] = ps
	}
	for env, flag := range map[string]string{"REDIS_TLS_CACERT": "store-tls-ca", "REDIS_TLS_CLIENT_CERT": "store-tls-cert", "REDIS_TLS_CLIENT_KEY": "store-tls-key"} {
		if v := e.getenv(env); v != "" {
			out[flag] = v
		}
	}
	if e.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
		out["store-tls-skip-hostname-verification"] = "true"
	}
	if p := e.getenv("CACHE_KEY_PREFIX"); p != "" {
		out["prefix"] = p
	}
	return nil
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
