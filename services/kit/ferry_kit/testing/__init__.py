"""Test helpers that ship with Ferry (fault-injecting proxy, ...); never imported by services."""
