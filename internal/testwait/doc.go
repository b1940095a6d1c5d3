// Package testwait waits, in tests, for a condition to come to hold: it
// polls the condition under a deadline instead of sleeping for a guessed
// time, and fails the test saying what did not happen. For names the
// condition, Until takes one that says why it does not hold yet, and Holds
// only reports, for waits that are not failures (a fault injector's, or
// gridtest's AwaitStable).
//
// It imports only the standard library, so that any package's tests can
// use it, the internal tests of the packages gridtest imports included
// (they could not import gridtest without a cycle).
package testwait
