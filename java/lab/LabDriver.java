// isrflow Kafka lab driver: the Admin / Producer work against a real Kafka 4.4.0 cluster.
//
// A long-running process: one command per line on stdin, one JSON object per line on stdout
// ({"ok": true, ...} or {"ok": false, "error": "..."}). Python (jobs/lab) orchestrates processes
// and faults; this program only talks to the cluster through kafka-clients 4.4.0.
//
//   java -cp '.cache/lab-classes:.cache/jars/kafka/*' LabDriver BOOTSTRAP ACKS_FILE
//
// Commands (tokens separated by blanks):
//   create TOPIC PARTITIONS RF [assign=1,2,3/2,3,1/...] [key=value ...]
//   produce-start RATE_PER_S TOPIC[,TOPIC...]     acks=all producer thread; acks -> ACKS_FILE
//   produce-stop                                   flushes, stops, reports counts
//   counts                                         acked / failed so far
//   describe TOPIC[,TOPIC...]                      leader, replicas, isr, elr, lastKnownElr
//   brokers                                        describeCluster nodes
//   reassign TOPIC PARTITION 1,2,3                 alterPartitionReassignments
//   cancel TOPIC PARTITION                         cancel a reassignment
//   reassignments                                  listPartitionReassignments
//   elect PREFERRED|UNCLEAN TOPIC[:P,P...]         electLeaders (all partitions of TOPIC if no :P)
//   config topic|broker NAME key=value [...]       incrementalAlterConfigs SET ("" broker = cluster default)
//   features                                       describeFeatures (finalized + supported)
//   quit
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

public class LabDriver {
    static final ObjectMapper JSON = new ObjectMapper();
    static Admin admin;
    // every admin future is awaited this long: a little more than DEFAULT_API_TIMEOUT_MS, so the
    // admin's own timeout (with its retries on other nodes) decides, not ours
    static final long WAIT_S = 25;
    static String bootstrap;
    static String acksPath;
    static volatile Thread producerThread;
    static volatile boolean producing;
    static final AtomicLong acked = new AtomicLong(), failed = new AtomicLong(), sent = new AtomicLong();
    static final Map<String, Long> errors = new ConcurrentHashMap<>();
    static PrintWriter acksOut;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        acksPath = args[1];
        admin = newAdmin();
        acksOut = new PrintWriter(new BufferedWriter(new OutputStreamWriter(
                new FileOutputStream(acksPath, true), StandardCharsets.UTF_8)));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        System.setOut(new PrintStream(OutputStream.nullOutputStream()));  // keep stdout for replies only
        out.println(JSON.writeValueAsString(Map.of("ok", true, "ready", true)));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) continue;
            Map<String, Object> reply = new LinkedHashMap<>();
            try {
                String[] t = line.split("\\s+");
                if (t[0].equals("quit")) { stopProducer(); reply.put("ok", true); out.println(JSON.writeValueAsString(reply)); break; }
                reply.put("ok", true);
                reply.putAll(READ_ONLY.contains(t[0]) ? handleRetrying(t) : handle(t));
            } catch (Throwable e) {
                Throwable c = (e instanceof ExecutionException && e.getCause() != null) ? e.getCause() : e;
                reply.clear();
                reply.put("ok", false);
                reply.put("error", c.getClass().getSimpleName() + ": " + c.getMessage());
                // the answer as the protocol carries it: the error code's name and the controller's message
                reply.put("error_code", Errors.forException(c).name());
                reply.put("message", c.getMessage());
            }
            out.println(JSON.writeValueAsString(reply));
        }
        stopProducer();
        admin.close(java.time.Duration.ofSeconds(5));
        acksOut.close();
        System.exit(0);
    }

    static Admin newAdmin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        // A SIGSTOPped broker holds a request until REQUEST_TIMEOUT_MS; the admin then retries on another
        // node. A call gets 20 s in all; a read that still times out is repeated (handleRetrying).
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, "200");
        return Admin.create(p);
    }

    // Commands that only read: safe to repeat. Under CI load an admin client once kept a listNodes
    // call parked on the connection to a SIGSTOPped broker for its whole deadline (tries=1: it never
    // moved to another node). A new client starts from the bootstrap list with fresh connections.
    static final Set<String> READ_ONLY = Set.of("describe", "brokers", "reassignments", "features");
    static final int READ_ATTEMPTS = 3;

    static Map<String, Object> handleRetrying(String[] t) throws Exception {
        for (int attempt = 1; ; attempt++) {
            try {
                return handle(t);
            } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
                Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                boolean timedOut = c instanceof org.apache.kafka.common.errors.TimeoutException
                        || c instanceof java.util.concurrent.TimeoutException;
                if (!timedOut || attempt >= READ_ATTEMPTS) throw e;
                System.err.println("[LabDriver] " + t[0] + ": " + c + "; new admin client, attempt " + (attempt + 1));
                Admin old = admin;
                admin = newAdmin();
                old.close(java.time.Duration.ZERO);
            }
        }
    }

    static Map<String, Object> handle(String[] t) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        switch (t[0]) {
            case "create": {
                String topic = t[1];
                int parts = Integer.parseInt(t[2]);
                short rf = Short.parseShort(t[3]);
                Map<String, String> cfg = new HashMap<>();
                Map<Integer, List<Integer>> assign = null;
                for (int i = 4; i < t.length; i++) {
                    if (t[i].startsWith("assign=")) {
                        assign = new HashMap<>();
                        String[] ps = t[i].substring(7).split("/");
                        for (int k = 0; k < ps.length; k++) assign.put(k, ints(ps[k]));
                    } else {
                        String[] kv = t[i].split("=", 2);
                        cfg.put(kv[0], kv[1]);
                    }
                }
                NewTopic nt = assign != null ? new NewTopic(topic, assign) : new NewTopic(topic, parts, rf);
                nt.configs(cfg);
                admin.createTopics(List.of(nt)).all().get(WAIT_S, TimeUnit.SECONDS);
                r.put("topic", topic);
                break;
            }
            case "produce-start": {
                startProducer(Integer.parseInt(t[1]), Arrays.asList(t[2].split(",")));
                break;
            }
            case "produce-stop": {
                stopProducer();
                r.putAll(counts());
                break;
            }
            case "counts": r.putAll(counts()); break;
            case "describe": {
                Map<String, TopicDescription> d = admin.describeTopics(Arrays.asList(t[1].split(",")))
                        .allTopicNames().get(WAIT_S, TimeUnit.SECONDS);
                List<Map<String, Object>> parts = new ArrayList<>();
                for (String topic : new TreeSet<>(d.keySet())) {
                    for (TopicPartitionInfo pi : d.get(topic).partitions()) {
                        Map<String, Object> m = new LinkedHashMap<>();
                        m.put("topic", topic);
                        m.put("partition", pi.partition());
                        m.put("leader", pi.leader() == null ? -1 : pi.leader().id());
                        m.put("replicas", ids(pi.replicas()));
                        m.put("isr", ids(pi.isr()));
                        m.put("elr", pi.elr() == null ? null : ids(pi.elr()));
                        m.put("last_known_elr", pi.lastKnownElr() == null ? null : ids(pi.lastKnownElr()));
                        parts.add(m);
                    }
                }
                r.put("partitions", parts);
                break;
            }
            case "brokers": {
                DescribeClusterResult c = admin.describeCluster();
                List<Integer> ids = new ArrayList<>();
                for (Node n : c.nodes().get(WAIT_S, TimeUnit.SECONDS)) ids.add(n.id());
                Collections.sort(ids);
                r.put("brokers", ids);
                r.put("cluster_id", c.clusterId().get(WAIT_S, TimeUnit.SECONDS));
                break;
            }
            case "reassign": {
                TopicPartition tp = new TopicPartition(t[1], Integer.parseInt(t[2]));
                admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(ints(t[3])))))
                        .all().get(WAIT_S, TimeUnit.SECONDS);
                break;
            }
            case "cancel": {
                TopicPartition tp = new TopicPartition(t[1], Integer.parseInt(t[2]));
                admin.alterPartitionReassignments(Map.of(tp, Optional.empty())).all().get(WAIT_S, TimeUnit.SECONDS);
                break;
            }
            case "reassignments": {
                List<Map<String, Object>> l = new ArrayList<>();
                for (Map.Entry<TopicPartition, PartitionReassignment> e :
                        admin.listPartitionReassignments().reassignments().get(WAIT_S, TimeUnit.SECONDS).entrySet()) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("topic", e.getKey().topic());
                    m.put("partition", e.getKey().partition());
                    m.put("replicas", e.getValue().replicas());
                    m.put("adding", e.getValue().addingReplicas());
                    m.put("removing", e.getValue().removingReplicas());
                    l.add(m);
                }
                r.put("reassignments", l);
                break;
            }
            case "elect": {
                ElectionType type = ElectionType.valueOf(t[1]);
                Set<TopicPartition> tps = new HashSet<>();
                String[] tp = t[2].split(":", 2);
                if (tp.length == 2) {
                    for (int p : ints(tp[1])) tps.add(new TopicPartition(tp[0], p));
                } else {
                    TopicDescription d = admin.describeTopics(List.of(tp[0])).allTopicNames().get(WAIT_S, TimeUnit.SECONDS).get(tp[0]);
                    for (TopicPartitionInfo pi : d.partitions()) tps.add(new TopicPartition(tp[0], pi.partition()));
                }
                Map<TopicPartition, Optional<Throwable>> res =
                        admin.electLeaders(type, tps).partitions().get(WAIT_S, TimeUnit.SECONDS);
                List<Map<String, Object>> l = new ArrayList<>();
                for (Map.Entry<TopicPartition, Optional<Throwable>> e : res.entrySet()) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("topic", e.getKey().topic());
                    m.put("partition", e.getKey().partition());
                    m.put("error", e.getValue().map(x -> x.getClass().getSimpleName() + ": " + x.getMessage()).orElse(null));
                    m.put("error_code", e.getValue().map(x -> Errors.forException(x).name()).orElse("NONE"));
                    m.put("message", e.getValue().map(Throwable::getMessage).orElse(null));
                    l.add(m);
                }
                l.sort(Comparator.comparing(m -> (Integer) m.get("partition")));
                r.put("results", l);
                break;
            }
            case "config": {
                ConfigResource.Type type = t[1].equals("topic") ? ConfigResource.Type.TOPIC : ConfigResource.Type.BROKER;
                String name = t[2].equals("\"\"") || t[2].equals("-") ? "" : t[2];
                List<AlterConfigOp> ops = new ArrayList<>();
                for (int i = 3; i < t.length; i++) {
                    String[] kv = t[i].split("=", 2);
                    ops.add(new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET));
                }
                admin.incrementalAlterConfigs(Map.of(new ConfigResource(type, name), ops)).all().get(WAIT_S, TimeUnit.SECONDS);
                break;
            }
            case "features": {
                FeatureMetadata f = admin.describeFeatures().featureMetadata().get(WAIT_S, TimeUnit.SECONDS);
                Map<String, Object> fin = new TreeMap<>(), sup = new TreeMap<>();
                f.finalizedFeatures().forEach((k, v) -> fin.put(k, v.maxVersionLevel()));
                f.supportedFeatures().forEach((k, v) -> sup.put(k, List.of(v.minVersion(), v.maxVersion())));
                r.put("finalized", fin);
                r.put("supported", sup);
                r.put("finalized_epoch", f.finalizedFeaturesEpoch().orElse(-1L));
                break;
            }
            default:
                throw new IllegalArgumentException("unknown command " + t[0]);
        }
        return r;
    }

    static Map<String, Object> counts() {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("sent", sent.get());
        r.put("acked", acked.get());
        r.put("failed", failed.get());
        r.put("errors", new TreeMap<>(errors));
        return r;
    }

    static void startProducer(int rate, List<String> topics) throws Exception {
        stopProducer();
        Map<String, Integer> nparts = new HashMap<>();
        for (TopicDescription d : admin.describeTopics(topics).allTopicNames().get(WAIT_S, TimeUnit.SECONDS).values())
            nparts.put(d.name(), d.partitions().size());
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "8000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "3000");
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "200");
        p.put("metadata.max.age.ms", "2000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        producing = true;
        Thread th = new Thread(() -> {
            try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
                long n = 0;
                long interval = Math.max(1, 1_000_000_000L / Math.max(1, rate));
                long next = System.nanoTime();
                while (producing) {
                    for (String topic : topics) {
                        int part = (int) (n % nparts.get(topic));
                        final long id = n;
                        final long sendMs = System.currentTimeMillis();
                        byte[] v = ("r" + id).getBytes(StandardCharsets.UTF_8);
                        try {
                            sent.incrementAndGet();
                            prod.send(new ProducerRecord<>(topic, part, null, v), (md, ex) -> onAck(topic, part, id, sendMs, md, ex));
                        } catch (Exception ex) {
                            onAck(topic, part, id, sendMs, null, ex);
                        }
                    }
                    n++;
                    next += interval;
                    long sleep = next - System.nanoTime();
                    if (sleep > 0) Thread.sleep(sleep / 1_000_000L, (int) (sleep % 1_000_000L));
                    else if (sleep < -5_000_000_000L) next = System.nanoTime();  // do not burst after a long block
                }
                prod.flush();
            } catch (InterruptedException ignored) {
            } catch (Exception e) {
                errors.merge("producer:" + e.getClass().getSimpleName(), 1L, Long::sum);
            }
        }, "lab-producer");
        th.setDaemon(true);
        producerThread = th;
        th.start();
    }

    static synchronized void onAck(String topic, int part, long id, long sendMs, RecordMetadata md, Exception ex) {
        if (ex == null && md != null) {
            acked.incrementAndGet();
            acksOut.println("{\"topic\":\"" + topic + "\",\"partition\":" + md.partition() + ",\"offset\":" + md.offset()
                    + ",\"ack_ms\":" + System.currentTimeMillis() + ",\"send_ms\":" + sendMs + ",\"value\":\"r" + id + "\"}");
            acksOut.flush();
        } else {
            failed.incrementAndGet();
            errors.merge(ex == null ? "unknown" : ex.getClass().getSimpleName(), 1L, Long::sum);
        }
    }

    static void stopProducer() throws InterruptedException {
        producing = false;
        Thread th = producerThread;
        if (th != null) {
            th.join(15_000);
            producerThread = null;
        }
        synchronized (LabDriver.class) { acksOut.flush(); }
    }

    static List<Integer> ints(String s) {
        List<Integer> l = new ArrayList<>();
        for (String x : s.split(",")) if (!x.isEmpty()) l.add(Integer.parseInt(x));
        return l;
    }

    static List<Integer> ids(List<Node> nodes) {
        List<Integer> l = new ArrayList<>();
        for (Node n : nodes) l.add(n.id());
        return l;
    }
}
