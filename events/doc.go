// Package events defines the coordinator's event log: one plain struct per event
// type, the envelope every event travels in, the msgpack codec, the registry that
// maps type names to constructors, and the Log interface with an in-memory
// implementation.
//
// Everything the coordinator decides is an event in one append-only log. The
// projection package folds these events into state; the commands package decides
// which events to append. This package imports nothing else from the repository:
// it knows only its codec.
package events
