// Package upstream is the set of servers behind the proxy's upstream URL,
// and the choice of one for each request: one URL (as most deployments
// have it), a fixed list of URLs, or every address a name resolves to (a
// Kubernetes headless Service: an address per ready pod), re-resolved on
// an interval, the last good set kept when a resolution fails and none
// left when the answer is that the name has no address. The proxy's own
// listening addresses are never servers. Requests are balanced by
// requests in flight with the least of two random choices; a server that
// refuses connections is set aside for a while and then tried again. It
// knows nothing of HTTP beyond the URL: the proxy sends each request to
// the server Pick chooses.
package upstream
