import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile;
import org.apache.kafka.storage.internals.epoch.LeaderEpochFileCache;
import org.apache.kafka.storage.internals.log.EpochEntry;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;

/**
 * Kafka 4.4.0's LeaderEpochFileCache (kafka-storage-4.4.0), for tests/test_kafka44_epoch_cache.py.
 * stdin, one operation per line: "NEW" (an empty cache), "ASSIGN e o", "TRUNCATE_END o",
 * "END_OFFSET_FOR e leo". stdout, one line per operation: the cache's entries after it as
 * "e:o e:o ...", then for END_OFFSET_FOR " = epoch offset".
 */
public class EpochCacheOracle {
    public static void main(String[] args) throws Exception {
        KafkaScheduler scheduler = new KafkaScheduler(1);
        scheduler.startup();
        File dir = new File(args[0]);
        LogDirFailureChannel failures = new LogDirFailureChannel(1);
        TopicPartition tp = new TopicPartition("t", 0);
        LeaderEpochFileCache cache = null;
        int n = 0;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ");
            String extra = "";
            switch (f[0]) {
                case "NEW":
                    File file = new File(dir, "leader-epoch-checkpoint-" + (n++));
                    cache = new LeaderEpochFileCache(tp, new LeaderEpochCheckpointFile(file, failures), scheduler);
                    break;
                case "ASSIGN":
                    cache.assign(Integer.parseInt(f[1]), Long.parseLong(f[2]));
                    break;
                case "TRUNCATE_END":
                    cache.truncateFromEndAsyncFlush(Long.parseLong(f[1]));
                    break;
                case "END_OFFSET_FOR":
                    Map.Entry<Integer, Long> r = cache.endOffsetFor(Integer.parseInt(f[1]), Long.parseLong(f[2]));
                    extra = " = " + r.getKey() + " " + r.getValue();
                    break;
                default:
                    throw new IllegalArgumentException(line);
            }
            StringBuilder sb = new StringBuilder();
            for (EpochEntry e : cache.epochEntries()) {
                if (sb.length() > 0) sb.append(' ');
                sb.append(e.epoch()).append(":").append(e.startOffset());
            }
            System.out.println(sb + extra);
        }
        scheduler.shutdown();
        System.out.flush();
    }
}
