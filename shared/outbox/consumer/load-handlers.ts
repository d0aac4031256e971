import { ConfigError } from '../errors/config-error.js';
import type { HandlerSet, RedisHandlerSet } from './handlers.js';

/** Why `value` is not a handler set `defineRedisHandlers` made, or undefined when it is one. */
export function notAHandlerSet(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return 'is not a handler set: make it with defineRedisHandlers(events, {...})';
  const set = value as Partial<HandlerSet>;
  if (set.mode !== 'redis' && set.mode !== 'database') return 'is not a handler set (no mode "redis" or "database"): make it with defineRedisHandlers(events, {...})';
  if (typeof (set.events as { deliver?: unknown } | undefined)?.deliver !== 'function') return 'has no events: pass what defineEvents made to defineRedisHandlers(events, {...})';
  if (typeof set.handlers !== 'object' || set.handlers === null) return 'has no handlers';
  return undefined;
}

const loaded = new Map<string, Promise<RedisHandlerSet>>();

/** The Redis handler set a module exports as `handlers`, imported once per thread; a ConfigError saying what is wrong otherwise. */
export function loadHandlerSet(url: string): Promise<RedisHandlerSet> {
  let set = loaded.get(url);
  if (!set) {
    set = import(url).then(
      (module: { handlers?: unknown }) => {
        const wrong = notAHandlerSet(module.handlers);
        if (wrong) throw new ConfigError(`handlers module ${url}: its export "handlers" ${wrong}`);
        if ((module.handlers as HandlerSet).mode === 'database') {
          // Its handlers write through this thread's connection to the consumer's database.
          throw new ConfigError(`handlers module ${url}: a database handler set runs in this thread: import it and pass the set itself as handlers`);
        }
        return module.handlers as RedisHandlerSet;
      },
      (error: Error) => {
        throw new ConfigError(`handlers module ${url} cannot be loaded: ${error.message}`);
      },
    );
    loaded.set(url, set);
  }
  return set;
}
