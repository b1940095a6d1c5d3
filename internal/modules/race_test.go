//go:build race

package modules

// raceOn: this test binary was built with -race, so the nested modules'
// tests are too.
const raceOn = true
