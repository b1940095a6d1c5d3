//go:build !race

package modules

const raceOn = false
