package redisstore

// Older is older, for the version table test.
var Older = older
