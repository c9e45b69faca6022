// Package policycore is the policy core that httplimit's middleware and
// grpclimit's interceptors (and, for its fields, sluice serve) share, so
// that each rule is written once and each door keeps only what is about
// its transport:
//
//   - names.go: which names a policy may take;
//   - keys.go: how store keys are made from a policy's name and a
//     request's key, bounded and joined so that two never meet;
//   - clientip.go: the client's address behind trusted proxies (the
//     walk of X-Forwarded-For and Forwarded from the right) and its IPv6
//     grouping;
//   - quota.go: a limit's draft-11 q and w, and rounding up to seconds;
//   - rule.go: a checked policy, its counts (Stats);
//   - part.go: a policy's share of a request (Part), and deciding a
//     request's parts as one composite (Take), a counting rule's part by a
//     look;
//   - refund.go: what an admitted request spent (Spend), and giving it
//     back;
//   - settle.go: what the handler charged (Charge), and settling a
//     request's Spends once its response says what it used or whether it
//     counts (Settle);
//   - fields.go: the RateLimit-Policy and RateLimit fields of
//     draft-ietf-httpapi-ratelimit-headers-11.
//
// It is internal so that each door keeps its own Policy type, options and
// errors; the rules themselves live here.
package policycore
