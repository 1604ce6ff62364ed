package eddy.parity;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.function.Consumer;

import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyTestDriver;
import java.time.Duration;

import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs each scenario of eddy's parity tests on Kafka Streams'
 * TopologyTestDriver with caching off and writes what it emits.
 *
 * Input file {name}.in: one record per line, "topic|key|value|timestamp",
 * value "<null>" for a tombstone. Output file {name}.out: the topology
 * description, a line "== outputs", then "topic|key|value|timestamp" per
 * output record in the order of the scenario's output topics.
 */
public final class Parity {
    record Scenario(Consumer<StreamsBuilder> build, Map<String, String> outputs) {}

    static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static Map<String, String> outs(String... topicAndType) {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = 0; i < topicAndType.length; i += 2) m.put(topicAndType[i], topicAndType[i + 1]);
        return m;
    }

    static List<String> words(String line) {
        List<String> out = new ArrayList<>();
        for (String w : line.toLowerCase().split("[^\\p{L}\\p{Nd}]+")) if (!w.isEmpty()) out.add(w);
        return out;
    }

    static {
        SCENARIOS.put("wordcount", new Scenario(b -> {
            KStream<String, String> lines = b.stream("text-input", Consumed.with(Serdes.String(), Serdes.String()));
            lines.flatMapValues(Parity::words)
                .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream().to("word-counts", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("word-counts", "long")));

        SCENARIOS.put("stateless", new Scenario(b -> {
            KStream<String, String> in = b.stream("in", Consumed.with(Serdes.String(), Serdes.String()));
            Map<String, KStream<String, String>> br = in
                .filter((k, v) -> !v.isEmpty())
                .mapValues(v -> v.toUpperCase())
                .peek((k, v) -> {})
                .split(Named.as("split-"))
                .branch((k, v) -> v.startsWith("A"), Branched.as("a"))
                .defaultBranch(Branched.as("other"));
            KStream<String, String> a = br.get("split-a");
            KStream<String, String> other = br.get("split-other").mapValues(v -> v + "!");
            a.to("out-a");
            other.to("out-other");
            a.selectKey((k, v) -> v).to("out-rekeyed");
            a.merge(other).filterNot((k, v) -> v.length() > 6).to("out-merged");
            in.flatMap((k, v) -> List.of(KeyValue.pair(k + "1", v), KeyValue.pair(k + "2", v))).to("out-flat");
        }, outs("out-a", "string", "out-other", "string", "out-rekeyed", "string", "out-merged", "string", "out-flat", "string")));

        SCENARIOS.put("reduce", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .mapValues(v -> v.trim())
                .groupByKey()
                .reduce((agg, v) -> agg + "," + v, Materialized.as("reduced"))
                .toStream().to("out");
        }, outs("out", "string")));

        SCENARIOS.put("cogroup", new Scenario(b -> {
            KGroupedStream<String, String> clicks = b.stream("clicks", Consumed.with(Serdes.String(), Serdes.String())).groupByKey();
            KGroupedStream<String, String> buys = b.stream("buys", Consumed.with(Serdes.String(), Serdes.String()))
                .groupBy((k, v) -> v.split(":")[0], Grouped.with("buys-by-user", Serdes.String(), Serdes.String()));
            clicks.<String>cogroup((k, v, agg) -> agg + " c:" + v)
                .cogroup(buys, (k, v, agg) -> agg + " b:" + v.split(":")[1])
                .aggregate(() -> "", Materialized.as("activity"))
                .toStream().to("out");
        }, outs("out", "string")));

        SCENARIOS.put("cogroup-tumbling", new Scenario(b -> {
            KGroupedStream<String, String> clicks = b.stream("clicks", Consumed.with(Serdes.String(), Serdes.String())).groupByKey();
            KGroupedStream<String, String> buys = b.stream("buys", Consumed.with(Serdes.String(), Serdes.String())).groupByKey();
            clicks.<String>cogroup((k, v, agg) -> agg + " c:" + v)
                .cogroup(buys, (k, v, agg) -> agg + " b:" + v)
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(100), Duration.ofMillis(20)))
                .aggregate(() -> "", Materialized.as("activity-100ms"))
                .toStream().map((wk, v) -> KeyValue.pair(wk.key() + "@" + wk.window().start() + "/" + wk.window().end(), v))
                .to("out", Produced.with(Serdes.String(), Serdes.String()));
        }, outs("out", "string")));

        SCENARIOS.put("cogroup-sliding", new Scenario(b -> {
            KGroupedStream<String, String> clicks = b.stream("clicks", Consumed.with(Serdes.String(), Serdes.String())).groupByKey();
            KGroupedStream<String, String> buys = b.stream("buys", Consumed.with(Serdes.String(), Serdes.String())).groupByKey();
            clicks.<String>cogroup((k, v, agg) -> agg + " c:" + v)
                .cogroup(buys, (k, v, agg) -> agg + " b:" + v)
                .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(50), Duration.ofMillis(30)))
                .aggregate(() -> "", Materialized.as("activity-sliding"))
                .toStream().map((wk, v) -> KeyValue.pair(wk.key() + "@" + wk.window().start() + "/" + wk.window().end(), v))
                .to("out", Produced.with(Serdes.String(), Serdes.String()));
        }, outs("out", "string")));

        SCENARIOS.put("aggregate-repartition", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .selectKey((k, v) -> v.substring(0, 1))
                .groupByKey(Grouped.<String, String>with(Serdes.String(), Serdes.String()).withName("by-first"))
                .aggregate(() -> "", (k, v, agg) -> agg + v, Materialized.as("agg"))
                .toStream().to("out");
        }, outs("out", "string")));

        SCENARIOS.put("table-ops", new Scenario(b -> {
            KTable<String, String> t = b.table("tin", Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.as("tin-store"));
            t.filter((k, v) -> !v.startsWith("x"))
                .mapValues(v -> Integer.toString(v.length()))
                .toStream().to("out");
        }, outs("out", "string")));

        SCENARIOS.put("table-groupby-count", new Scenario(b -> {
            b.table("users", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("users-store"))
                .groupBy((user, region) -> KeyValue.pair(region, user), Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("region-counts"))
                .toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("table-groupby-reduce", new Scenario(b -> {
            b.table("scores", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("scores-store"))
                .groupBy((player, v) -> KeyValue.pair(v.split(":")[0], v.split(":")[1]),
                    Grouped.with(Serdes.String(), Serdes.String()))
                .reduce((agg, v) -> Long.toString(Long.parseLong(agg) + Long.parseLong(v)),
                    (agg, v) -> Long.toString(Long.parseLong(agg) - Long.parseLong(v)),
                    Materialized.as("team-totals"))
                .toStream().to("out");
        }, outs("out", "string")));

        SCENARIOS.put("totable", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .toTable(Materialized.as("tt"))
                .toStream().to("out");
        }, outs("out", "string")));
    }

    static KeyValue<String, Long> flat(Windowed<String> wk, Long v) {
        return KeyValue.pair(wk.key() + "@" + wk.window().start() + "/" + wk.window().end(), v);
    }

    static {
        SCENARIOS.put("tumbling-count", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(100), Duration.ofMillis(20)))
                .count(Materialized.as("tw"))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("hopping-count", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(100), Duration.ofMillis(50)).advanceBy(Duration.ofMillis(40)))
                .count(Materialized.as("hw"))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("tumbling-emit-on-close", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(100), Duration.ofMillis(20)))
                .emitStrategy(EmitStrategy.onWindowClose())
                .count(Materialized.as("ew"))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("tumbling-suppress", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(100), Duration.ofMillis(20)))
                .count(Materialized.as("sw"))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("sliding-suppress", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(50), Duration.ofMillis(30)))
                .count(Materialized.as("ssw"))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("sliding-suppress-no-grace", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(SlidingWindows.ofTimeDifferenceWithNoGrace(Duration.ofMillis(50)))
                .count(Materialized.as("ssn"))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("session-suppress", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(30), Duration.ofMillis(20)))
                .count(Materialized.as("ssu"))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("table-suppress-time-limit", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .count(Materialized.as("stl"))
                .suppress(Suppressed.untilTimeLimit(Duration.ofMillis(50), Suppressed.BufferConfig.maxRecords(3).emitEarlyWhenFull()))
                .toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("sliding-aggregate", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(50), Duration.ofMillis(30)))
                .aggregate(() -> "", (k, v, agg) -> agg + v, Materialized.as("sl"))
                .toStream().map((wk, v) -> KeyValue.pair(wk.key() + "@" + wk.window().start() + "/" + wk.window().end(), v))
                .to("out", Produced.with(Serdes.String(), Serdes.String()));
        }, outs("out", "string")));

        SCENARIOS.put("sliding-emit-on-close", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(50), Duration.ofMillis(30)))
                .emitStrategy(EmitStrategy.onWindowClose())
                .count(Materialized.as("sc"))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("session-emit-on-close", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(30), Duration.ofMillis(20)))
                .emitStrategy(EmitStrategy.onWindowClose())
                .count(Materialized.as("se"))
                .toStream().map((wk, v) -> KeyValue.pair(wk.key() + "@" + wk.window().start() + "/" + wk.window().end(), v == null ? "<null>" : v.toString()))
                .to("out", Produced.with(Serdes.String(), Serdes.String()));
        }, outs("out", "string")));

        SCENARIOS.put("session-aggregate", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(30), Duration.ofMillis(20)))
                .aggregate(() -> "", (k, v, agg) -> agg + v, (k, a, c) -> a + "|" + c,
                    Materialized.<String, String, org.apache.kafka.streams.state.SessionStore<org.apache.kafka.common.utils.Bytes, byte[]>>as("sa")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
                .toStream().map((wk, v) -> KeyValue.pair(wk.key() + "@" + wk.window().start() + "/" + wk.window().end(), v == null ? "<null>" : v))
                .to("out", Produced.with(Serdes.String(), Serdes.String()));
        }, outs("out", "string")));

        SCENARIOS.put("hopping-emit-on-close", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(100), Duration.ofMillis(50)).advanceBy(Duration.ofMillis(40)))
                .emitStrategy(EmitStrategy.onWindowClose())
                .count(Materialized.as("he"))
                .toStream().map(Parity::flat).to("out", Produced.with(Serdes.String(), Serdes.Long()));
        }, outs("out", "long")));

        SCENARIOS.put("session-count", new Scenario(b -> {
            b.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(30), Duration.ofMillis(20)))
                .count(Materialized.as("ss"))
                .toStream().map((wk, v) -> KeyValue.pair(wk.key() + "@" + wk.window().start() + "/" + wk.window().end(), v == null ? "<null>" : v.toString()))
                .to("out", Produced.with(Serdes.String(), Serdes.String()));
        }, outs("out", "string")));
    }

    static {
        SCENARIOS.put("stream-table-join", new Scenario(b -> {
            KTable<String, String> users = b.table("users", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("users-store"));
            KStream<String, String> clicks = b.stream("clicks", Consumed.with(Serdes.String(), Serdes.String()));
            clicks.join(users, (click, region) -> click + "/" + region).to("inner");
            clicks.leftJoin(users, (click, region) -> click + "/" + (region == null ? "?" : region)).to("left");
        }, outs("inner", "string", "left", "string")));

        SCENARIOS.put("versioned-table", new Scenario(b -> {
            b.table("in", Consumed.with(Serdes.String(), Serdes.String()),
                    Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vt-store", Duration.ofMillis(100))))
                .toStream().to("out");
        }, outs("out", "string")));

        SCENARIOS.put("versioned-stream-table-join", new Scenario(b -> {
            KTable<String, String> users = b.table("users", Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vusers", Duration.ofMillis(200))));
            KStream<String, String> clicks = b.stream("clicks", Consumed.with(Serdes.String(), Serdes.String()));
            clicks.join(users, (click, region) -> click + "/" + region).to("inner");
            clicks.leftJoin(users, (click, region) -> click + "/" + (region == null ? "?" : region)).to("left");
        }, outs("inner", "string", "left", "string")));

        SCENARIOS.put("versioned-stream-table-join-grace", new Scenario(b -> {
            KTable<String, String> users = b.table("users", Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vgusers", Duration.ofMillis(200))));
            KStream<String, String> clicks = b.stream("clicks", Consumed.with(Serdes.String(), Serdes.String()));
            clicks.join(users, (click, region) -> click + "/" + region,
                org.apache.kafka.streams.kstream.Joined.<String, String, String>with(Serdes.String(), Serdes.String(), Serdes.String())
                    .withGracePeriod(Duration.ofMillis(50))).to("inner");
            clicks.leftJoin(users, (click, region) -> click + "/" + (region == null ? "?" : region),
                org.apache.kafka.streams.kstream.Joined.<String, String, String>with(Serdes.String(), Serdes.String(), Serdes.String())
                    .withGracePeriod(Duration.ofMillis(30))).to("left");
        }, outs("inner", "string", "left", "string")));

        // The buffer's time moves only with records it takes: a stream
        // record without a value (dropped) moves it not (issue 65).
        SCENARIOS.put("versioned-grace-stream-tombstone-left", new Scenario(b -> {
            KTable<String, String> users = b.table("users", Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vtusers", Duration.ofSeconds(10))));
            KStream<String, String> clicks = b.stream("clicks", Consumed.with(Serdes.String(), Serdes.String()));
            clicks.leftJoin(users, (click, region) -> click + "|" + (region == null ? "null" : region),
                org.apache.kafka.streams.kstream.Joined.<String, String, String>with(Serdes.String(), Serdes.String(), Serdes.String())
                    .withGracePeriod(Duration.ofSeconds(4))).to("left");
        }, outs("left", "string")));

        SCENARIOS.put("versioned-grace-stream-tombstone-inner", new Scenario(b -> {
            KTable<String, String> users = b.table("users", Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vgusers", Duration.ofSeconds(6))));
            KStream<String, String> clicks = b.stream("clicks", Consumed.with(Serdes.String(), Serdes.String()));
            clicks.join(users, (click, region) -> click + "|" + region,
                org.apache.kafka.streams.kstream.Joined.<String, String, String>with(Serdes.String(), Serdes.String(), Serdes.String())
                    .withGracePeriod(Duration.ofSeconds(6))).to("inner");
        }, outs("inner", "string")));

        SCENARIOS.put("versioned-table-table-join", new Scenario(b -> {
            KTable<String, String> l = b.table("lt", Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vlt", Duration.ofMillis(100))));
            KTable<String, String> r = b.table("rt", Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vrt", Duration.ofMillis(100))));
            l.join(r, (a, c) -> a + "+" + c).toStream().to("inner");
            l.leftJoin(r, (a, c) -> a + "+" + (c == null ? "?" : c)).toStream().to("left");
        }, outs("inner", "string", "left", "string")));

        SCENARIOS.put("stream-global-join", new Scenario(b -> {
            GlobalKTable<String, String> products = b.globalTable("products", Consumed.with(Serdes.String(), Serdes.String()));
            KStream<String, String> orders = b.stream("orders", Consumed.with(Serdes.String(), Serdes.String()));
            // Orders are "product:qty", keyed by order id; joined by product.
            orders.join(products, (id, o) -> o == null ? null : o.split(":")[0], (o, p) -> o + "/" + p).to("inner");
            orders.leftJoin(products, (id, o) -> o == null ? null : o.split(":")[0], (o, p) -> o + "/" + (p == null ? "?" : p)).to("left");
        }, outs("inner", "string", "left", "string")));

        SCENARIOS.put("table-table-join", new Scenario(b -> {
            KTable<String, String> l = b.table("lt", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("lt-store"));
            KTable<String, String> r = b.table("rt", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("rt-store"));
            l.join(r, (a, c) -> a + "+" + c).toStream().to("inner");
            l.leftJoin(r, (a, c) -> a + "+" + (c == null ? "?" : c)).toStream().to("left");
            l.outerJoin(r, (a, c) -> (a == null ? "?" : a) + "+" + (c == null ? "?" : c)).toStream().to("outer");
        }, outs("inner", "string", "left", "string", "outer", "string")));

        SCENARIOS.put("fk-join", new Scenario(b -> {
            KTable<String, String> orders = b.table("orders", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("orders-store"));
            KTable<String, String> products = b.table("products", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("products-store"));
            // Orders are "product:qty"; "-:qty" names no product.
            java.util.function.Function<String, String> fk = o -> o.startsWith("-") ? null : o.split(":")[0];
            orders.join(products, fk, (o, p) -> o + "/" + p,
                Materialized.<String, String, org.apache.kafka.streams.state.KeyValueStore<org.apache.kafka.common.utils.Bytes, byte[]>>as("fk-inner")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.String())).toStream().to("inner");
            orders.leftJoin(products, fk, (o, p) -> o + "/" + (p == null ? "?" : p),
                Materialized.<String, String, org.apache.kafka.streams.state.KeyValueStore<org.apache.kafka.common.utils.Bytes, byte[]>>as("fk-left")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.String())).toStream().to("left");
        }, outs("inner", "string", "left", "string")));

        SCENARIOS.put("versioned-fk-join", new Scenario(b -> {
            KTable<String, String> orders = b.table("orders", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vorders", Duration.ofMillis(100))));
            KTable<String, String> products = b.table("products", Consumed.with(Serdes.String(), Serdes.String()), Materialized.as(org.apache.kafka.streams.state.Stores.persistentVersionedKeyValueStore("vproducts", Duration.ofMillis(100))));
            // Orders are "product:qty"; "-:qty" names no product.
            java.util.function.Function<String, String> fk = o -> o.startsWith("-") ? null : o.split(":")[0];
            orders.join(products, fk, (o, p) -> o + "/" + p,
                Materialized.<String, String, org.apache.kafka.streams.state.KeyValueStore<org.apache.kafka.common.utils.Bytes, byte[]>>as("vfk-inner")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.String())).toStream().to("inner");
            orders.leftJoin(products, fk, (o, p) -> o + "/" + (p == null ? "?" : p),
                Materialized.<String, String, org.apache.kafka.streams.state.KeyValueStore<org.apache.kafka.common.utils.Bytes, byte[]>>as("vfk-left")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.String())).toStream().to("left");
        }, outs("inner", "string", "left", "string")));

        SCENARIOS.put("stream-stream-join", new Scenario(b -> {
            KStream<String, String> l = b.stream("ls", Consumed.with(Serdes.String(), Serdes.String()));
            KStream<String, String> r = b.stream("rs", Consumed.with(Serdes.String(), Serdes.String()));
            org.apache.kafka.streams.kstream.JoinWindows w =
                org.apache.kafka.streams.kstream.JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(50), Duration.ofMillis(20));
            l.join(r, (a, c) -> a + "+" + c, w).to("inner");
            l.leftJoin(r, (a, c) -> a + "+" + (c == null ? "?" : c), w).to("left");
            l.outerJoin(r, (a, c) -> (a == null ? "?" : a) + "+" + (c == null ? "?" : c), w).to("outer");
        }, outs("inner", "string", "left", "string", "outer", "string")));
    }

    static {
        // Asymmetric windows without grace: the other record may be up to
        // 40 ms older or 10 ms newer.
        SCENARIOS.put("stream-stream-join-asymmetric", new Scenario(b -> {
            KStream<String, String> l = b.stream("ls", Consumed.with(Serdes.String(), Serdes.String()));
            KStream<String, String> r = b.stream("rs", Consumed.with(Serdes.String(), Serdes.String()));
            org.apache.kafka.streams.kstream.JoinWindows w =
                org.apache.kafka.streams.kstream.JoinWindows.ofTimeDifferenceWithNoGrace(Duration.ofMillis(10)).before(Duration.ofMillis(40));
            l.join(r, (a, c) -> a + "+" + c, w).to("inner");
            l.leftJoin(r, (a, c) -> a + "+" + (c == null ? "?" : c), w).to("left");
            l.outerJoin(r, (a, c) -> (a == null ? "?" : a) + "+" + (c == null ? "?" : c), w).to("outer");
        }, outs("inner", "string", "left", "string", "outer", "string")));
    }

    // Parity DIR [scenario…]: runs the named scenarios (default: all) on
    // DIR/<name>.in, writing DIR/<name>.out. Parity DIR --random: every
    // DIR/<scenario>@<seed>.in (random inputs written by the Go side).
    public static void main(String[] args) throws IOException {
        Path dir = Path.of(args[0]);
        List<String> names;
        boolean quiet = false;
        if (args.length > 1 && args[1].equals("--random")) {
            names = new ArrayList<>();
            try (var files = Files.list(dir)) {
                files.map(f -> f.getFileName().toString())
                    .filter(f -> f.endsWith(".in") && f.contains("@"))
                    .sorted()
                    .forEach(f -> names.add(f.substring(0, f.length() - 3)));
            }
            quiet = true;
        } else {
            names = args.length > 1 ? Arrays.asList(args).subList(1, args.length) : new ArrayList<>(SCENARIOS.keySet());
        }
        for (String name : names) {
            String base = name.contains("@") ? name.substring(0, name.indexOf('@')) : name;
            Scenario sc = SCENARIOS.get(base);
            if (sc == null) throw new IllegalArgumentException("no scenario " + base);
            run(name, sc, dir, quiet);
        }
        if (quiet) System.out.println("parity: wrote " + names.size() + " outputs of random inputs in " + dir);
    }

    static void run(String name, Scenario sc, Path dir, boolean quiet) throws IOException {
        StreamsBuilder b = new StreamsBuilder();
        sc.build.accept(b);
        Topology top = b.build();
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "parity");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        StringBuilder out = new StringBuilder(top.describe().toString());
        out.append("== outputs\n");
        try (TopologyTestDriver d = new TopologyTestDriver(top, p)) {
            Map<String, TestInputTopic<String, String>> inputs = new LinkedHashMap<>();
            Map<String, TestOutputTopic<String, ?>> outputs = new LinkedHashMap<>();
            for (Map.Entry<String, String> e : sc.outputs.entrySet()) {
                Serde<?> vs = e.getValue().equals("long") ? Serdes.Long() : Serdes.String();
                outputs.put(e.getKey(), d.createOutputTopic(e.getKey(), Serdes.String().deserializer(), vs.deserializer()));
            }
            for (String line : Files.readAllLines(dir.resolve(name + ".in"), StandardCharsets.UTF_8)) {
                if (line.isBlank() || line.startsWith("#")) continue;
                String[] f = line.split("\\|", -1);
                TestInputTopic<String, String> in = inputs.computeIfAbsent(f[0],
                    t -> d.createInputTopic(t, Serdes.String().serializer(), Serdes.String().serializer()));
                in.pipeInput(f[1], f[2].equals("<null>") ? null : f[2], Long.parseLong(f[3]));
            }
            for (Map.Entry<String, TestOutputTopic<String, ?>> e : outputs.entrySet()) {
                for (TestRecord<String, ?> r : e.getValue().readRecordsToList()) {
                    out.append(e.getKey()).append('|').append(r.key()).append('|')
                        .append(r.value() == null ? "<null>" : r.value().toString()).append('|')
                        .append(r.timestamp()).append('\n');
                }
            }
        }
        Files.writeString(dir.resolve(name + ".out"), out.toString(), StandardCharsets.UTF_8);
        if (!quiet) System.out.println("parity: wrote " + name + ".out");
    }
}
