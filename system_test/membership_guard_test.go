package system_test

// waitsFor says which issue 10 defect, fixed in another change, a failing
// check of TestMembershipRandomized is known to wait for ("" when none):
// such a failure is logged with the run's state and skips the seed (at
// once when the step or the settle failed, at the seed's end otherwise),
// while every other check still fails the test. check is "step",
// "settle", "groups", "duplicates", "callers" or "history"; st the step
// it followed. An entry goes when its defect's fix is merged: none is
// left.
func waitsFor(check string, st step) string {
	return ""
}
