// Package rlsconfig is a minimal stand-in for the real package (branch
// rlsconfig), used by internal/serve until that lands: it reads JSON only and
// matches exact values or a key alone, one level per entry.
package rlsconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
)

// Entry is one descriptor entry.
type Entry struct{ Key, Value string }

// Rule is one limit of the configuration.
type Rule struct {
	Domain, Path, Name string
	Limit              sluice.Limit
	Unit               string
	RequestsPerUnit    int64
	Unlimited, Shadow, DetailedMetric, ShareThreshold bool
	Replaces           []string
}

// Config is a loaded configuration.
type Config struct {
	domains map[string]*node
	rules   []*Rule
	sources []string
}

type node struct {
	children map[string]*node
	rule     *Rule
}

type fileDesc struct {
	Key         string     `json:"key"`
	Value       string     `json:"value"`
	RateLimit   *fileRate  `json:"rate_limit"`
	Descriptors []fileDesc `json:"descriptors"`
	ShadowMode  bool       `json:"shadow_mode"`
	Detailed    bool       `json:"detailed_metric"`
}

type fileRate struct {
	Unit            string `json:"unit"`
	RequestsPerUnit int64  `json:"requests_per_unit"`
	Unlimited       bool   `json:"unlimited"`
	Name            string `json:"name"`
	Replaces        []struct {
		Name string `json:"name"`
	} `json:"replaces"`
}

type fileConf struct {
	Domain      string     `json:"domain"`
	Descriptors []fileDesc `json:"descriptors"`
}

// Load reads a file or a directory.
func Load(path string) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	names := []string{path}
	if st.IsDir() {
		names, _ = filepath.Glob(filepath.Join(path, "*.yaml"))
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		files[n] = b
	}
	return Parse(files)
}

var units = map[string]time.Duration{"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}

// Parse reads files by name.
func Parse(files map[string][]byte) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for name, b := range files {
		var fc fileConf
		if err := json.Unmarshal(b, &fc); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if fc.Domain == "" {
			return nil, fmt.Errorf("%s: empty domain", name)
		}
		root := &node{children: map[string]*node{}}
		c.domains[fc.Domain] = root
		c.sources = append(c.sources, name)
		if err := c.add(fc.Domain, "", root, fc.Descriptors); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	sort.Strings(c.sources)
	return c, nil
}

func (c *Config) add(domain, prefix string, parent *node, ds []fileDesc) error {
	for _, d := range ds {
		k := d.Key + "_" + d.Value
		path := strings.TrimPrefix(prefix+"."+k, ".")
		n := &node{children: map[string]*node{}}
		parent.children[k] = n
		if d.RateLimit != nil {
			r := &Rule{Domain: domain, Path: path, Name: d.RateLimit.Name, Unit: d.RateLimit.Unit, RequestsPerUnit: d.RateLimit.RequestsPerUnit,
				Unlimited: d.RateLimit.Unlimited, Shadow: d.ShadowMode, DetailedMetric: d.Detailed}
			for _, rp := range d.RateLimit.Replaces {
				r.Replaces = append(r.Replaces, rp.Name)
			}
			if !r.Unlimited {
				p, ok := units[d.RateLimit.Unit]
				if !ok {
					return fmt.Errorf("bad unit %q", d.RateLimit.Unit)
				}
				r.Limit = sluice.Per(r.RequestsPerUnit, p).Using(sluice.AlignedWindow)
			}
			n.rule = r
			c.rules = append(c.rules, r)
		}
		if err := c.add(domain, path, n, d.Descriptors); err != nil {
			return err
		}
	}
	return nil
}

// Domains lists the domains.
func (c *Config) Domains() []string {
	var out []string
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Rules lists the rules.
func (c *Config) Rules() []*Rule { return c.rules }

// Sources lists the files.
func (c *Config) Sources() []string { return c.sources }

// Resolve finds each descriptor's rule.
func (c *Config) Resolve(domain string, descriptors [][]Entry) []*Rule {
	out := make([]*Rule, len(descriptors))
	root := c.domains[domain]
	if root == nil {
		return out
	}
	replaced := map[string]bool{}
	for i, d := range descriptors {
		n := root
		for _, e := range d {
			next := n.children[e.Key+"_"+e.Value]
			if next == nil {
				next = n.children[e.Key+"_"]
			}
			n = next
			if n == nil {
				break
			}
		}
		if n != nil {
			out[i] = n.rule
			if n.rule != nil {
				for _, r := range n.rule.Replaces {
					replaced[r] = true
				}
			}
		}
	}
	for i, r := range out {
		if r != nil && r.Name != "" && replaced[r.Name] {
			out[i] = nil
		}
	}
	return out
}

// Key is the store key.
func (r *Rule) Key(entries []Entry) string {
	var b strings.Builder
	b.WriteString(r.Domain)
	for _, e := range entries {
		b.WriteString("_" + e.Key + "_" + e.Value)
	}
	return b.String()
}

// Override makes a rule from a request's limit.
func Override(domain string, entries []Entry, requestsPerUnit uint32, unit string) (*Rule, error) {
	p, ok := units[unit]
	if !ok {
		return nil, errors.New("bad unit " + unit)
	}
	return &Rule{Domain: domain, Path: "override", Unit: unit, RequestsPerUnit: int64(requestsPerUnit),
		Limit: sluice.Per(int64(requestsPerUnit), p).Using(sluice.AlignedWindow)}, nil
}
