// Package conformance replays the transcripts of tests/conformance
// through this library (runner_test.go).
package conformance
