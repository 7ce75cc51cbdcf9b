// Package integration holds the integration tests of the Go client:
// real Redis and brokers, started by the shared conformance helper.
package integration
