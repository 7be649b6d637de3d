package upstream

import "net"

// Family is which of a name's address families the set balances over.
// A dual-stack headless Service has an A and an AAAA record for each of
// its pods: balanced over both, each pod would be counted, labelled and
// chosen twice. As Envoy's DNS lookup family, one family at a time by
// default.
type Family string

// The families, named as Envoy's.
const (
	// FamilyV4Preferred: the A records; the AAAA ones when there are none.
	FamilyV4Preferred Family = "v4_preferred"
	// FamilyAuto: the AAAA records; the A ones when there are none.
	FamilyAuto Family = "auto"
	// FamilyV4Only: the A records.
	FamilyV4Only Family = "v4_only"
	// FamilyV6Only: the AAAA records.
	FamilyV6Only Family = "v6_only"
	// FamilyAll: both, each address a server of its own.
	FamilyAll Family = "all"
)

// Families are the families by name.
var Families = []Family{FamilyV4Preferred, FamilyAuto, FamilyV4Only, FamilyV6Only, FamilyAll}

// of returns the addresses of ips the family takes.
func (f Family) of(ips []net.IPAddr) []net.IPAddr {
	var v4, v6 []net.IPAddr
	for _, ip := range ips {
		if ip.IP.To4() != nil {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	switch f {
	case FamilyAll:
		return ips
	case FamilyV4Only:
		return v4
	case FamilyV6Only:
		return v6
	case FamilyAuto:
		if len(v6) > 0 {
			return v6
		}
		return v4
	}
	if len(v4) > 0 {
		return v4
	}
	return v6
}
