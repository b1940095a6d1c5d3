// Package report turns the cells of a benchmark run (one workload against
// one target in one round) into its outputs: per workload and target the
// median across rounds, the ratio to the grid measured in the same round, a
// text table, a Markdown table, results.json and PNG/SVG plots.
package report
