// Package stats records the samples of one benchmark run and computes its
// summary from them: operations per second, latency percentiles from an HDR
// histogram, error and duplicate counts, and the per-second throughput.
//
// A Recorder belongs to one goroutine (one benchmark worker); Summarize
// merges the recorders of a run. Nothing here reads a clock: the caller
// passes each sample's latency and end offset and the run's elapsed time, so
// the summary is a pure function of the recorded samples.
package stats
