package projection

// Indexed reports whether a group holds a member index (tests only: a group
// without one answers by scanning, so its answers alone cannot tell).
func Indexed(g *Group) bool { return g.ix != nil }
