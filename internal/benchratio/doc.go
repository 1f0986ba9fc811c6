// Package benchratio runs Go benchmarks that compare ways of doing the same
// work in one run: every side runs b.N operations, interleaved in short
// slices whose order rotates, so that drift of the machine (other processes,
// CPU frequency, a GC of either side) lands on all sides alike; each
// candidate is reported as a ratio of its throughput to the baseline's,
// from the totals and as the median of the per-slice ratios (which one noisy
// slice cannot move).
//
// It imports only the standard library.
package benchratio
