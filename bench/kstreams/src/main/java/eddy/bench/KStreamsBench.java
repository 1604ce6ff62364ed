package eddy.bench;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * One Kafka Streams instance (one stream thread) running a benchmark
 * workload until it is told to stop (SIGTERM). It prints RUNNING on stdout
 * when the instance first reaches the RUNNING state; the Go side measures
 * from there, on the same broker and topics it gives eddy.
 *
 * <p>Arguments: workload (stateless | wordcount | windowed | join | statecount | regroupcount),
 * guarantee (at_least_once | exactly_once), bootstrap servers, application
 * id, state directory, commit interval in ms, output topic, then the input
 * topics (join: stream topic, table topic).
 *
 * <p>System properties the rebalance benchmark sets: {@code eddy.standbys}
 * (num.standby.replicas), {@code eddy.session.timeout.ms} (the consumer's
 * session timeout) and {@code eddy.report.restored} (print "RESTORED n",
 * the changelog records restored so far, whenever a store's restore ends).
 *
 * <p>Logging is slf4j-simple, configured by eddybench on the command line:
 * StreamThread's debug line per commit goes to a file, from which eddybench
 * reads Kafka Streams' commit durations.
 */
public final class KStreamsBench {
  public static void main(String[] args) throws Exception {
    if (args.length < 8) {
      System.err.println("usage: KStreamsBench workload guarantee bootstrap app-id state-dir commit-ms output input...");
      System.exit(2);
    }
    String workload = args[0], guarantee = args[1], bootstrap = args[2], appId = args[3], stateDir = args[4];
    long commitMs = Long.parseLong(args[5]);
    String out = args[6];
    String[] in = Arrays.copyOfRange(args, 7, args.length);

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        guarantee.equals("exactly_once") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.getInteger("eddy.threads", 1));
    p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    String standbys = System.getProperty("eddy.standbys");
    if (standbys != null) {
      p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, Integer.parseInt(standbys));
    }
    String session = System.getProperty("eddy.session.timeout.ms");
    if (session != null) {
      p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), Integer.parseInt(session));
    }

    StreamsBuilder b = new StreamsBuilder();
    switch (workload) {
      case "stateless" -> {
        KStream<byte[], byte[]> s = b.stream(in[0], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()));
        s.filter((k, v) -> v != null && v.length > 0)
            .mapValues(v -> new String(v, StandardCharsets.ISO_8859_1).toUpperCase().getBytes(StandardCharsets.ISO_8859_1))
            .to(out, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
      }
      case "wordcount" -> {
        KStream<String, String> lines = b.stream(in[0], Consumed.with(Serdes.String(), Serdes.String()));
        lines.flatMapValues(l -> Arrays.asList(l.trim().split("\\s+")))
            .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
            .toStream()
            .to(out, Produced.with(Serdes.String(), Serdes.Long()));
      }
      case "windowed" -> {
        KStream<String, String> s = b.stream(in[0], Consumed.with(Serdes.String(), Serdes.String()));
        s.groupByKey()
            .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMinutes(1)))
            .count(Materialized.as("window-counts"))
            .toStream()
            .map((wk, n) -> KeyValue.pair(wk.key() + "@" + wk.window().start(), n))
            .to(out, Produced.with(Serdes.String(), Serdes.Long()));
      }
      case "join" -> {
        KStream<String, String> s = b.stream(in[0], Consumed.with(Serdes.String(), Serdes.String()));
        KTable<String, String> t = b.table(in[1], Consumed.with(Serdes.String(), Serdes.String()),
            Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("table"));
        s.join(t, (v, tv) -> v + "|" + tv).to(out, Produced.with(Serdes.String(), Serdes.String()));
      }
      case "regroupcount" -> {
        KStream<String, String> s = b.stream(in[0], Consumed.with(Serdes.String(), Serdes.String()));
        s.groupBy((k, v) -> k, Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
            .toStream()
            .to(out, Produced.with(Serdes.String(), Serdes.Long()));
      }
      case "statecount" -> {
        KStream<String, String> s = b.stream(in[0], Consumed.with(Serdes.String(), Serdes.String()));
        s.groupByKey()
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
            .toStream()
            .to(out, Produced.with(Serdes.String(), Serdes.Long()));
      }
      default -> {
        System.err.println("unknown workload " + workload);
        System.exit(2);
      }
    }
    Topology top = b.build();
    KafkaStreams ks = new KafkaStreams(top, p);
    CountDownLatch stopped = new CountDownLatch(1);
    ks.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING && before == KafkaStreams.State.REBALANCING) {
        System.out.println("RUNNING");
        System.out.flush();
      }
      if (now == KafkaStreams.State.ERROR) {
        System.err.println("kafka streams failed");
        System.exit(1);
      }
    });
    if (Boolean.getBoolean("eddy.report.restored")) {
      AtomicLong restored = new AtomicLong();
      ks.setGlobalStateRestoreListener(new StateRestoreListener() {
        @Override
        public void onRestoreStart(TopicPartition tp, String store, long start, long end) {}

        @Override
        public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {}

        @Override
        public void onRestoreEnd(TopicPartition tp, String store, long total) {
          synchronized (System.out) {
            System.out.println("RESTORED " + restored.addAndGet(total));
            System.out.flush();
          }
        }
      });
    }
    if (Boolean.getBoolean("eddy.report.tasks")) {
      Thread reporter = new Thread(() -> reportTasks(ks));
      reporter.setDaemon(true);
      reporter.start();
    }
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      ks.close(Duration.ofSeconds(60));
      stopped.countDown();
    }));
    ks.start();
    stopped.await();
  }

  /**
   * Prints every 250 ms each stream thread's active tasks and records
   * processed: "TASKS" then per thread "ids:processed" (ids comma-separated
   * and sorted, "-" for none), as eddybench's own child does.
   */
  private static void reportTasks(KafkaStreams ks) {
    while (true) {
      try {
        Thread.sleep(250);
      } catch (InterruptedException e) {
        return;
      }
      if (ks.state() != KafkaStreams.State.RUNNING && ks.state() != KafkaStreams.State.REBALANCING) {
        continue;
      }
      java.util.Map<String, Double> processed = new java.util.HashMap<>();
      ks.metrics().forEach((name, metric) -> {
        if (name.name().equals("process-total") && name.group().equals("stream-thread-metrics")) {
          Object v = metric.metricValue();
          if (v instanceof Double d) {
            processed.put(name.tags().get("thread-id"), d);
          }
        }
      });
      StringBuilder line = new StringBuilder("TASKS");
      for (var t : ks.metadataForLocalThreads()) {
        java.util.List<String> ids = new java.util.ArrayList<>();
        for (var task : t.activeTasks()) {
          ids.add(task.taskId().toString());
        }
        java.util.Collections.sort(ids);
        line.append(' ').append(ids.isEmpty() ? "-" : String.join(",", ids)).append(':')
            .append(Math.round(processed.getOrDefault(t.threadName(), 0.0)));
      }
      synchronized (System.out) {
        System.out.println(line);
        System.out.flush();
      }
    }
  }
}
