package routing

import "strings"

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = 16384

// Slot returns the Redis Cluster hash slot of key, in [0, SlotCount):
// CRC16-XMODEM of the hash input, masked with SlotCount-1. The hash input
// is the text between the first '{' and the next '}' when that text is
// non-empty, otherwise the whole key (Redis's hash tag rule).
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key) & (SlotCount - 1))
}

// crc16 is CRC16-XMODEM: polynomial 0x1021, initial value 0, no input or
// output reflection, no final xor.
func crc16[T string | []byte](data T) uint16 {
	var crc uint16
	for i := 0; i < len(data); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^data[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
