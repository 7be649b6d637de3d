package metrics

import "strings"

// Tenant label values that do not name a tenant.
const (
	// TenantNone is the tenant of requests without the tenant header, and
	// of every request when no tenant header is configured.
	TenantNone = "_none"
	// TenantOther is the tenant of values outside the allow-list, past the
	// cap, too long, or that look like credentials.
	TenantOther = ModelOther
)

// maxTenantNameBytes bounds a tenant label value.
const maxTenantNameBytes = 128

// newTenantLabels returns the labeler of tenants: allow-listed, else the
// first max distinct values seen, others TenantOther; an absent value is
// TenantNone. Values that look like credentials never become labels.
func newTenantLabels(allow []string, max int) *boundedLabels {
	l := newBoundedLabels(allow, nil, max)
	l.empty = TenantNone
	l.refuse = looksLikeCredential
	return l
}

// credentialPrefixes start the API keys and tokens of common providers and
// schemes: a tenant header misconfigured to carry one must not copy it
// into every series.
var credentialPrefixes = []string{
	"bearer ", "basic ", "sk-", "sk_", "pk-", "pk_", "rk-", "rk_", "hf_", "ghp_", "gho_",
	"github_pat_", "xoxb-", "xoxp-",
}

// credentialPrefixesCased are prefixes that mean a credential only in this
// case: AWS access key ids, Google API keys, JSON web tokens.
var credentialPrefixesCased = []string{"AKIA", "ASIA", "AIza", "eyJ"}

// looksLikeCredential reports whether a header value may be a secret: it
// is longer than a tenant name, starts like a known key or token, or
// holds characters no tenant name needs.
func looksLikeCredential(v string) bool {
	if len(v) > maxTenantNameBytes {
		return true
	}
	lower := strings.ToLower(v)
	for _, p := range credentialPrefixes {
		if strings.HasPrefix(lower, p) {
			return true
		}
	}
	for _, p := range credentialPrefixesCased {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return strings.ContainsAny(v, " \t=+")
}
