"""Real KRaft metadata logs: decode (record batch v2 segments, snapshots, kafka-dump-log text), import as an
isrflow stream + `kafka_records`, and audit every controller decision against isrflow's.
See docs/metadata-import.md."""
