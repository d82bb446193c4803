import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

import kafka.server.KafkaConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.storage.internals.log.LogConfig;

/**
 * What Kafka 4.4.0 says of topic configs, for tests/test_kafka44_topic_configs.py: how the controller
 * validates a topic's config (LogConfig#validate with a default broker's log config, as
 * ControllerConfigurationValidator calls it), and the table of LogConfig's keys.
 *
 * stdin, a line per request: "DUMP" prints each key of LogConfig.configDefCopy() in its order as
 * "name TAB type TAB validator"; "DOUBLE TAB v" prints Double.toString(Double.parseDouble(v)); otherwise
 * the line is name TAB value (TAB name TAB value ...), and the answer is "OK" or the exception's message. Each answer is one line; a message's newlines are
 * written as \n.
 */
public class TopicConfigOracle {
    public static void main(String[] args) throws Exception {
        Properties broker = new Properties();
        broker.put("process.roles", "broker");
        broker.put("node.id", "1");
        broker.put("controller.quorum.bootstrap.servers", "127.0.0.1:9093");
        broker.put("controller.listener.names", "CONTROLLER");
        broker.put("listeners", "PLAINTEXT://127.0.0.1:9092");
        broker.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
        Map<String, Object> logDefaults = new KafkaConfig(broker).extractLogConfigMap();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.equals("DUMP")) {
                for (ConfigDef.ConfigKey k : LogConfig.configDefCopy().configKeys().values()) {
                    System.out.println(k.name + "\t" + k.type + "\t" + k.validator);
                }
                System.out.println("END");
                continue;
            }
            String[] f = line.split("\t", -1);
            if (f[0].equals("DOUBLE")) {         // how Kafka's messages print a parsed DOUBLE
                System.out.println(Double.toString(Double.parseDouble(f[1])));
                continue;
            }
            Map<String, String> props = new HashMap<>();
            for (int i = 0; i + 1 < f.length; i += 2) {
                props.put(f[i], f[i + 1]);
            }
            String out;
            try {
                LogConfig.validate(new HashMap<>(), props, logDefaults, false);
                out = "OK";
            } catch (Exception e) {
                out = String.valueOf(e.getMessage()).replace("\n", "\\n");
            }
            System.out.println(out);
        }
        System.out.flush();
    }
}
