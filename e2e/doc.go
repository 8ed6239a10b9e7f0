// Package e2e holds the tests of the whole story: `make demo` run as CI
// runs it (TestDemo), and the end-to-end test of the fleet in network
// namespaces (TestEndToEnd). It has no code of its own.
//
//	go test -count=1 -run TestDemo ./e2e/
package e2e
