package rlsconfig

import "testing"

func TestStatKey(t *testing.T) {
	c := load(t, `
domain: st
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        descriptors:
          - key: user
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: method
        descriptors:
          - key: user
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: action
    value: read*
    descriptors:
      - key: doc
        rate_limit: {unit: minute, requests_per_unit: 6}
  - key: tagged
    value: read*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: shared
    value: files/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 6}
  - key: joined
    value: x
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: client
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: shared_detailed
    value: x*
    share_threshold: true
    descriptors:
      - key: id
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 6}
`)
	tests := []struct{ in, want string }{
		{"route=api method=GET user=7", "st.route_api.method_GET.user"},
		{"route=api method=PUT user=7", "st.route_api.method.user"},
		{"action=readme doc=1", "st.action_read*.doc"},
		{"tagged=readme", "st.tagged_readme"},
		{"shared=files/a.pdf method=GET", "st.shared_files/*.method"},
		{"client=10.0.0.1", "st.client_10.0.0.1"},
		// envoy names a level by how the entry reached it: here by the
		// key alone ("joined_x" is the composite key of joined=x).
		{"joined=x", "st.joined_x"},
		{"joined_x=zz", "st.joined_x"},
		{"client", "st.client_"},
		{"shared_detailed=x1 id=9", "st.shared_detailed_x*.id_9"},
		{"shared_detailed=x1 id", "st.shared_detailed_x*.id"},
	}
	for _, tt := range tests {
		in := es(tt.in)
		r := c.Resolve("st", [][]Entry{in})[0]
		if r == nil {
			t.Errorf("%s: no rule", tt.in)
			continue
		}
		if got := r.StatKey(in); got != tt.want {
			t.Errorf("%s: StatKey = %q, want %q", tt.in, got, tt.want)
		}
	}
	o, err := Override("st", es("a=1 b"), 5, "SECOND")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := o.StatKey(es("a=1 b")), "st.a_1.b"; got != want {
		t.Errorf("override StatKey = %q, want %q", got, want)
	}
}
