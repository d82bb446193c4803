// Independent decoding of KRaft metadata files with Kafka's own classes (the oracle of tests/test_metalog_*.py).
// Prints one JSON line per record: {"offset", "control", "apiKey", "version", "data"} where data is
// MetadataJsonConverters.writeJson(message, version) — the JSON `kafka-dump-log --cluster-metadata-decoder` prints.
// Build and run (tests do this, under the heavy lock): see jobs/metalog/oracle.py.
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;

import org.apache.kafka.common.metadata.MetadataJsonConverters;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;

public class MetalogOracle {
    public static void main(String[] args) throws Exception {
        MetadataRecordSerde serde = MetadataRecordSerde.INSTANCE;
        StringBuilder out = new StringBuilder();
        for (String f : args) {
            ByteBuffer buf = ByteBuffer.wrap(Files.readAllBytes(Paths.get(f)));
            MemoryRecords records = MemoryRecords.readableRecords(buf);
            for (RecordBatch batch : records.batches()) {
                for (Record r : batch) {
                    out.setLength(0);
                    out.append("{\"file\":\"").append(Paths.get(f).getFileName()).append("\",\"offset\":").append(r.offset());
                    if (batch.isControlBatch()) {
                        short type = r.key().getShort(2);
                        out.append(",\"control\":true,\"controlType\":").append(type).append("}");
                    } else {
                        ApiMessageAndVersion mv = serde.read(new ByteBufferAccessor(r.value()), r.valueSize());
                        out.append(",\"control\":false,\"apiKey\":").append(mv.message().apiKey())
                           .append(",\"version\":").append(mv.version())
                           .append(",\"data\":").append(MetadataJsonConverters.writeJson(mv.message(), mv.version()).toString())
                           .append("}");
                    }
                    System.out.println(out);
                }
            }
        }
    }
}
