package routing

// Test-only access to internals, for the external routing_test package.
var (
	CRC16       = crc16[[]byte]
	AttemptSeed = attemptSeed
)
