package rlsconfig_test

import (
	"fmt"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

func ExampleConfig_Resolve() {
	c, err := rlsconfig.Parse(map[string][]byte{"edge.yaml": []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token-bucket, burst: 50}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	request := [][]rlsconfig.Entry{
		{{Key: "remote_address", Value: "10.0.0.1"}},
		{{Key: "path", Value: "/api/users"}},
		{{Key: "country", Value: "fr"}},
	}
	for i, r := range c.Resolve("edge", request) {
		if r == nil {
			fmt.Println("no limit")
			continue
		}
		fmt.Println(r.Path, r.Limit, r.Key(request[i]))
	}
	// Output:
	// remote_address 10/1s aligned-window burst 10 edge/remote_address=10.0.0.1
	// path=/api/* 600/1m0s token-bucket burst 50 edge/path=%2Fapi%2Fusers
	// no limit
}

func ExampleParse_error() {
	_, err := rlsconfig.Parse(map[string][]byte{"bad.yaml": []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: fortnight, requests_per_unit: 10}
`)})
	fmt.Println(err)
	// Output:
	// bad.yaml:5: descriptor edge.remote_address: invalid rate limit unit 'fortnight': want second, minute, hour, day, week, month or year (or, sluice's extension, period: 90s instead of unit)
}

func ExampleLoad() {
	c, err := rlsconfig.Load("testdata/dir")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Domains())
	for _, r := range c.Rules() {
		fmt.Println(r.Domain, r.Path, r.RequestsPerUnit, "per", r.Unit)
	}
	// Output:
	// [alpha beta]
	// alpha k 7 per month
	// beta k=v 3 per year
}

func ExampleOverride() {
	entries := []rlsconfig.Entry{{Key: "remote_address", Value: "10.0.0.1"}}
	r, err := rlsconfig.Override("edge", entries, 100, "MINUTE")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Limit, r.Key(entries), r.StatKey(entries))
	// Output:
	// 100/1m0s aligned-window burst 100 edge/remote_address=10.0.0.1 edge.remote_address_10.0.0.1
}

func ExampleConfig_ResolveConcurrency() {
	c, err := rlsconfig.Parse(map[string][]byte{"jobs.yaml": []byte(`
domain: jobs
descriptors:
  - key: tenant
    concurrency: {max: 10, lifetime: 30s}
    descriptors:
      - key: priority
        value: critical
        concurrency: {headroom: 0}
      - key: priority
        concurrency: {headroom: 2}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range [][]rlsconfig.Entry{
		{{Key: "tenant", Value: "acme"}, {Key: "priority", Value: "critical"}},
		{{Key: "tenant", Value: "acme"}, {Key: "priority", Value: "batch"}},
		{{Key: "user", Value: "ann"}},
	} {
		cc := c.ResolveConcurrency("jobs", d)
		if cc == nil {
			fmt.Println("no concurrency limit")
			continue
		}
		fmt.Println(cc.Path, "of pool", cc.Pool, cc.Key(d), "max", cc.Limit.Limit, "headroom", cc.Limit.Headroom, "lifetime", cc.Limit.Lifetime)
	}
	// Output:
	// tenant/priority=critical of pool tenant jobs/tenant=acme max 10 headroom 0 lifetime 30s
	// tenant/priority of pool tenant jobs/tenant=acme max 10 headroom 2 lifetime 30s
	// no concurrency limit
}
