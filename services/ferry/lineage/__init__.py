"""OpenLineage run events for every file's run across both clusters (docs/operations.md,
"Lineage (OpenLineage)"): naming, event building, the non-blocking emitter and the stage hooks."""
