// One consumer process of the scale-out stage (partition-consumer-bench.ts forks one per partition):
// it connects to its partition, warms up, creates the lab's consumer, says it is ready, drains when told to go,
// and reports when its drain started and ended (this process's clock on the machine's time line:
// performance.timeOrigin + performance.now()), the CPU time it used meanwhile and what it applied. Nothing else runs in it.
import { handlers } from '../../lab/orders/order-handlers.js';
import { createConsumer } from '../../outbox/consumer/create-consumer.js';
import { closeRedis } from '../../outbox/redis/connect.js';
import { connectTarget, type RedisTarget } from '../../outbox/redis/connect-partitions.js';

export interface ChildTask {
  target: RedisTarget;
  /** The partition's key tag ('' for the one partition of a single Redis). */
  partition: string;
  consumerId: string;
}

/** The namespace of the warm-up queue each process drains before it says it is ready. */
export const WARM_UP_NAMESPACE = 'bench-warm-up';

export type ChildReport = { ready: true } | { startedAt: number; endedAt: number; applied: number; received: number; cpuMs: number } | { error: string };

const now = () => performance.timeOrigin + performance.now();
const send = (report: ChildReport) => new Promise<void>((resolve) => process.send!(report, () => resolve()));

process.once('message', async (task: ChildTask) => {
  try {
    // Warm-up, in a namespace of its own on the same partition: compiled code and loaded scripts.
    const warm = await connectTarget({ ...task.target, namespace: WARM_UP_NAMESPACE }, { partition: task.partition });
    await (await createConsumer({ redis: warm, handlers, consumerId: task.consumerId, batchSize: 1000 })).drain();
    await closeRedis(warm);
    const redis = await connectTarget(task.target, { partition: task.partition });
    const consumer = await createConsumer({ redis, handlers, consumerId: task.consumerId, batchSize: 1000 });
    await send({ ready: true });
    await new Promise((resolve) => process.once('message', resolve));
    const cpu = process.cpuUsage();
    const startedAt = now();
    const stats = await consumer.drain();
    const endedAt = now();
    const { user, system } = process.cpuUsage(cpu);
    await send({ startedAt, endedAt, applied: stats.applied, received: stats.received, cpuMs: (user + system) / 1000 });
    await consumer.close();
    await closeRedis(redis);
  } catch (error) {
    await send({ error: error instanceof Error ? error.message : String(error) });
  }
  process.disconnect();
});
