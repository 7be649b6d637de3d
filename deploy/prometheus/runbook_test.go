package prometheus_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// runbookURL is where every alert's runbook_url points: a section of
// RUNBOOK.md on the main branch.
const runbookURL = "https://github.com/itlproxy/itlproxy/blob/main/deploy/prometheus/RUNBOOK.md#"

// TestEveryAlertHasItsRunbookSection wants every alert of rules.yaml to
// link the RUNBOOK.md section named after it, and that section to exist
// with its three parts: an alert added without its section would page
// someone with a link that leads nowhere.
func TestEveryAlertHasItsRunbookSection(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	data, err := os.ReadFile("rules.yaml")
	if err == nil {
		err = yaml.Unmarshal(data, &rules)
	}
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := runbookSections(string(runbook))
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if want := runbookURL + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			body, ok := sections[r.Alert]
			if !ok {
				t.Errorf("%s: RUNBOOK.md has no section \"## %s\"", r.Alert, r.Alert)
				continue
			}
			for _, part := range []string{"**Means:**", "**Confirm:**", "**Do:**"} {
				if !strings.Contains(body, part) {
					t.Errorf("RUNBOOK.md, section %s: no %s", r.Alert, part)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("rules.yaml has no alert")
	}
}

var heading = regexp.MustCompile(`(?m)^## (.+)$`)

// runbookSections returns the text of each "## " section of a runbook by
// its heading.
func runbookSections(text string) map[string]string {
	out := map[string]string{}
	locs := heading.FindAllStringSubmatchIndex(text, -1)
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out[text[loc[2]:loc[3]]] = text[loc[1]:end]
	}
	return out
}

// TestITLAlertsSayEachStallCause wants the section of every alert about
// inter-token latency or stalls to say what each cause of a stall means
// for it, and to lead to the runbook's account of the causes, which says
// what to look at and what to do for each: chunked prefill and its
// budget, the engine's preemption and swap counters, the client.
func TestITLAlertsSayEachStallCause(t *testing.T) {
	runbook, err := os.ReadFile("RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(runbook)
	n := 0
	for name, body := range runbookSections(text) {
		if !strings.Contains(name, "ITL") && !strings.Contains(name, "Stall") {
			continue
		}
		n++
		for _, want := range []string{"`prefill`", "`upstream`", "`client`", "(#stalls-by-cause)"} {
			if !strings.Contains(body, want) {
				t.Errorf("RUNBOOK.md, section %s: does not say %s", name, want)
			}
		}
	}
	if n < 4 {
		t.Errorf("%d sections of ITL and stall alerts, want 4 at least", n)
	}
	_, causes, ok := strings.Cut(text, "\n### Stalls by cause\n")
	causes, _, _ = strings.Cut(causes, "\n## ")
	if !ok {
		t.Fatal("RUNBOOK.md has no \"### Stalls by cause\"")
	}
	for _, want := range []string{"`prefill`", "`upstream`", "`client`", "--enable-chunked-prefill", "--max-num-batched-tokens",
		"vllm:num_preemptions_total", "swap", "`request_id`", "Stalls per minute by cause", "a gateway replica only its share"} {
		if !strings.Contains(causes, want) {
			t.Errorf("RUNBOOK.md, Stalls by cause: does not say %s", want)
		}
	}
}
