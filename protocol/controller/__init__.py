"""The controller room (Kafka's metadata module: ReplicationControlManager, PartitionChangeBuilder).

change_builder  PartitionChangeBuilder: build() calls the named steps in Kafka's order
replication     one function per controller decision; commit; AlterPartition validation and handling
admin           admin requests (reassignment, leader elections, config changes' ClearElr)

Never imports broker/: committed registrations leave through `p.channels.publish`.
"""
