package cli

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
)

// envoyStatsFlags are serve's --envoy-stats and --near-limit-ratio.
type envoyStatsFlags struct {
	on    bool
	ratio float64
}

func (e *envoyStatsFlags) flags(fs *flag.FlagSet) {
	fs.BoolVar(&e.on, "envoy-stats", false, "also export envoyproxy/ratelimit's per-rule counters on /metrics, with its Prometheus names and labels (ratelimit_service_rate_limit_total_hits, _over_limit, _near_limit, _within_limit, _shadow_mode by domain, key1, key2), so that its dashboards and alerts work unchanged (envoy's USE_PROMETHEUS)")
	fs.Float64Var(&e.ratio, "near-limit-ratio", serve.DefaultNearLimitRatio, "--envoy-stats: hits that take a window's count above this share of its limit, and within it, count as near the limit (envoy's NEAR_LIMIT_RATIO)")
}

// apply sets o's envoy statistics.
func (e *envoyStatsFlags) apply(o *serve.Options) error {
	if !(e.ratio > 0 && e.ratio <= 1) {
		return fmt.Errorf("--near-limit-ratio %v: want more than 0, at most 1", e.ratio)
	}
	o.EnvoyStats, o.NearLimitRatio = e.on, e.ratio
	return nil
}

// envoyStatsEnv reads envoy's Prometheus statistics: USE_PROMETHEUS and
// NEAR_LIMIT_RATIO (its listener, PROMETHEUS_ADDR, is sluice's HTTP
// listener: /metrics there).
func envoyStatsEnv(e *envoyVars, out map[string]string) error {
	if e.boolean("USE_PROMETHEUS") {
		out["envoy-stats"] = "true"
	}
	if v := e.getenv("NEAR_LIMIT_RATIO"); v != "" {
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return fmt.Errorf("envoy environment: NEAR_LIMIT_RATIO=%q is not a number", v)
		}
		out["near-limit-ratio"] = v
	}
	return nil
}
