// examples/quickstart/main.ts: write rows and events in one transaction, relay, consume.
import Database from 'better-sqlite3';
import { closeRedis, connectRedis, createConsumer, createOutbox, createRelay } from 'outbox';
import { taskEvents } from './events.js';

const db = new Database(process.env.TASKS_DB ?? 'tasks.db');
db.pragma('journal_mode = WAL');
db.exec('CREATE TABLE IF NOT EXISTS tasks (id INTEGER PRIMARY KEY, title TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0)');
const outbox = createOutbox(db, { events: taskEvents });

// The business row and its event in ONE transaction: both are written, or neither.
const addTask = db.transaction((title: string) => {
  const id = Number(db.prepare('INSERT INTO tasks (title) VALUES (?)').run(title).lastInsertRowid);
  outbox.append({ aggregateType: 'task', aggregateId: id, type: 'TaskAdded', payload: { title } });
  return id;
});
const completeTask = db.transaction((id: number) => {
  db.prepare('UPDATE tasks SET done = 1 WHERE id = ?').run(id);
  outbox.append({ aggregateType: 'task', aggregateId: id, type: 'TaskCompleted', payload: {} });
});

const first = addTask('write the outbox');
addTask('relay it');
completeTask(first);

// A namespace of its own (`todo:` in front of every key): it runs beside the lab on the same Redis.
const redis = await connectRedis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { namespace: 'todo' });
await createRelay(db, redis).relayAll(); // PENDING rows → outbox.events, then PUBLISHED
const consumer = await createConsumer({ redis, handlers: new URL('./handlers.js', import.meta.url) });
await consumer.drain(); // runs the handlers on worker threads; each event's effects applied once
await consumer.close();
console.log(`open tasks: ${(await redis.smembers('tasks:open')).sort().join(' ')}`);
console.log(`completed: ${await redis.hget('tasks:stats', 'completed')}`);
await closeRedis(redis);
db.close();
