# Quick start: events into a Quiver store, a subscriber out of it, batch reads and writes.
import os
import sys
import tempfile
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this Python
from pyspark.sql import SparkSession

from quiver_spark import QuiverStore

work = tempfile.mkdtemp(prefix="quiver-quickstart-")  # any writable directory
store = f"{work}/quiver"
spark = (
    SparkSession.builder.appName("quiver-quickstart")
    # errors of a Python data source then read "[ERROR_CLASS] ...: <Quiver's one line>"
    # without a worker traceback (conf/spark-defaults.conf sets it too)
    .config("spark.sql.execution.pyspark.udf.hideTraceback.enabled", "true")
    .getOrCreate()
)

# some input: 1,000 events as JSON files, read as a stream
spark.range(1000).selectExpr("id", "current_timestamp() AS ts").write.json(f"{work}/input")
events = spark.readStream.schema("id LONG, ts TIMESTAMP").json(f"{work}/input")

# producer: exactly-once into the store (created by its first write)
producer = (
    events.writeStream.format("quiver")
    .option("checkpointLocation", f"{work}/ckpt/ingest")
    .option("segment.max_open_duration", "1s")  # committed rows readable within 1 s
    .trigger(availableNow=True)
    .start(store)
)
producer.awaitTermination()

# batch write: Spark's default mode (ErrorIfExists) is refused; a store takes appends
more = spark.range(1000, 1010).selectExpr("id", "current_timestamp() AS ts")
more.write.format("quiver").mode("append").save(store)

# batch read of what the store retains (finalized segments)
deadline = time.monotonic() + 60
while (rows := spark.read.format("quiver").load(store).count()) < 1010:
    assert time.monotonic() < deadline, f"only {rows} rows readable after 60 s"
    time.sleep(0.5)

# a second subscriber, registered before the first one reads: the store keeps each
# segment until both have read it (`quiver status`, below, shows this one's lag)
with QuiverStore.open(store, partition=None, create=False) as handle:
    handle.subscribers.register("warehouse_loader")

# consumer: a subscriber gets every row exactly once; its acknowledgements free the disk
consumer = (
    spark.readStream.format("quiver")
    .option("subscriber", "parquet_exporter")
    .load(store)
    .writeStream.format("parquet")
    .option("checkpointLocation", f"{work}/ckpt/export")
    .trigger(availableNow=True)
    .start(f"{work}/out")
)
consumer.awaitTermination()
print(f"exported {spark.read.parquet(f'{work}/out').count()} rows from {store}")
spark.stop()
