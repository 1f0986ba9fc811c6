package coordinator

// PendingGraces is the number of graces of dropped held heartbeats not
// decided yet (hold.go), for the external tests.
func (s *Service) PendingGraces() int { return int(s.beats.graces.Load()) }
