package events

// Endpoint is an API whose requests and responses this package reads: it
// chooses the reader of a response's events.
type Endpoint uint8

// The endpoints. Other is every request the proxy forwards without
// measuring.
const (
	ChatCompletions Endpoint = iota // /v1/chat/completions
	Completions                     // /v1/completions
	Responses                       // /v1/responses
	Messages                        // /v1/messages (Anthropic)
	Other
)

// labels are the endpoint label values of itlproxy's metrics, which its
// dashboards and alerts query: they never change.
var labels = [...]string{
	ChatCompletions: "chat_completions",
	Completions:     "completions",
	Responses:       "responses",
	Messages:        "messages",
	Other:           "other",
}

// Label returns the endpoint's metric label value ("chat_completions",
// "completions", "responses", "messages" or "other").
func (e Endpoint) Label() string {
	if int(e) < len(labels) {
		return labels[e]
	}
	return labels[Other]
}
