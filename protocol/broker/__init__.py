"""The broker room (Kafka's core module: Partition.scala, ReplicaManager, AbstractFetcherThread).

leader          becoming/leaving leader, HWM, ISR expansion and shrink, purgatory, the leader's
                half of produce / fetch / client reads, leader-epoch fencing
follower        becoming follower, the fetch it sends (modelled, or recorded with drift), what it
                does with the answer (copy, truncate on divergence or when ahead)
fetch           one follower fetch, both ends, in Kafka's order
metadata_cache  applying a registration: the replica's role change

Never imports controller/: AlterPartition requests leave through `p.channels.send_alter_partition`.
"""
