import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.DirectoryId;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.PartitionChangeRecord;
import org.apache.kafka.controller.PartitionChangeBuilder;
import org.apache.kafka.metadata.LeaderRecoveryState;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import org.apache.kafka.server.common.MetadataVersion;

/**
 * Kafka 4.4.0's own PartitionChangeBuilder (kafka-metadata-4.4.0, MetadataVersion.latestProduction()),
 * for tests/test_kafka44_change_builder.py. stdin, one JSON object per line: the registration
 * (replicas, isr, elr, lke, leader, lrs 0/1, adding, removing), the builder's arguments (min_isr,
 * elr_on, acceptable: the brokers isAcceptableLeader admits, election ONLINE/PREFERRED/UNCLEAN) and
 * its targets, each optional (target_isr, target_replicas, target_adding, target_removing,
 * unclean_shutdown, target_lrs). stdout, one JSON object per line: {} when build() gives no record,
 * else the record's fields that are set (leader unless -2, isr, elr, lke, replicas, removing,
 * adding, lrs unless -1).
 */
public class ChangeBuilderOracle {
    static int[] ints(JsonNode n) {
        int[] out = new int[n == null ? 0 : n.size()];
        for (int i = 0; i < out.length; i++) out[i] = n.get(i).asInt();
        return out;
    }

    static List<Integer> list(JsonNode n) {
        List<Integer> out = new ArrayList<>();
        for (int x : ints(n)) out.add(x);
        return out;
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            JsonNode c = json.readTree(line);
            int[] replicas = ints(c.get("replicas"));
            PartitionRegistration reg = new PartitionRegistration.Builder()
                .setReplicas(replicas)
                .setDirectories(DirectoryId.unassignedArray(replicas.length))
                .setIsr(ints(c.get("isr")))
                .setElr(ints(c.get("elr")))
                .setLastKnownElr(ints(c.get("lke")))
                .setRemovingReplicas(ints(c.get("removing")))
                .setAddingReplicas(ints(c.get("adding")))
                .setLeader(c.get("leader").asInt())
                .setLeaderRecoveryState(LeaderRecoveryState.of((byte) c.get("lrs").asInt()))
                .setLeaderEpoch(5)
                .setPartitionEpoch(7)
                .build();
            Set<Integer> acceptable = new HashSet<>(list(c.get("acceptable")));
            PartitionChangeBuilder b = new PartitionChangeBuilder(reg, Uuid.fromString("AAAAAAAAAAAAAAAAAAAAAA"), 0,
                acceptable::contains, MetadataVersion.latestProduction(), c.get("min_isr").asInt(),
                c.get("elr_on").asBoolean());
            b.setDefaultDirProvider(uuid -> DirectoryId.UNASSIGNED);
            b.setElection(PartitionChangeBuilder.Election.valueOf(c.get("election").asText()));
            if (c.hasNonNull("target_isr")) b.setTargetIsr(list(c.get("target_isr")));
            if (c.hasNonNull("target_replicas")) b.setTargetReplicas(list(c.get("target_replicas")));
            if (c.hasNonNull("target_adding")) b.setTargetAdding(list(c.get("target_adding")));
            if (c.hasNonNull("target_removing")) b.setTargetRemoving(list(c.get("target_removing")));
            if (c.hasNonNull("unclean_shutdown")) b.setUncleanShutdownReplicas(list(c.get("unclean_shutdown")));
            if (c.hasNonNull("target_lrs")) {
                b.setTargetLeaderRecoveryState(LeaderRecoveryState.of((byte) c.get("target_lrs").asInt()));
            }
            ObjectNode out = json.createObjectNode();
            try {
                Optional<ApiMessageAndVersion> built = b.build();
                if (built.isPresent()) {
                    PartitionChangeRecord r = (PartitionChangeRecord) built.get().message();
                    if (r.leader() != -2) out.put("leader", r.leader());
                    if (r.isr() != null) out.set("isr", json.valueToTree(r.isr()));
                    if (r.eligibleLeaderReplicas() != null) out.set("elr", json.valueToTree(r.eligibleLeaderReplicas()));
                    if (r.lastKnownElr() != null) out.set("lke", json.valueToTree(r.lastKnownElr()));
                    if (r.replicas() != null) out.set("replicas", json.valueToTree(r.replicas()));
                    if (r.removingReplicas() != null) out.set("removing", json.valueToTree(r.removingReplicas()));
                    if (r.addingReplicas() != null) out.set("adding", json.valueToTree(r.addingReplicas()));
                    if (r.leaderRecoveryState() != -1) out.put("lrs", r.leaderRecoveryState());
                }
            } catch (RuntimeException e) {
                out.put("error", e.toString());
            }
            System.out.println(json.writeValueAsString(out));
        }
        System.out.flush();
    }
}
