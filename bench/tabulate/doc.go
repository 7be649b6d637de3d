// Command tabulate turns the raw results bench/run.sh writes (itlbench's
// -json reports, `go test -bench` output, a pprof summary) into the
// Markdown tables of BENCHMARKS.md and a CSV of the same figures. It
// prints the tables, writes tables.md and summary.csv next to the results,
// and with -write replaces the mode's section of a Markdown file (the
// full run's, in BENCHMARKS.md; the raw results are not committed).
//
//	go run ./bench/tabulate -dir bench/results/full -write BENCHMARKS.md
package main
