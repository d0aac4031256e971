import { connect } from 'node:net';

/** The arguments of one MONITOR line (`+<time> [<db> <addr>] "cmd" "arg" …`), as Redis quoted them (escapes kept but `\"` and `\\`). */
function argsOf(line: string): string[] {
  return [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map(([, quoted]) => quoted.replace(/\\(["\\])/g, '$1'));
}

/**
 * Calls `onCommand` with each command the Redis at `url` runs (MONITOR) while `run` runs, from the
 * moment MONITOR is on, and when Redis ran it (its clock, ms since the epoch). A raw socket: ioredis's monitor mode can take a monitored line for the
 * reply to one of its own commands ("Command queue state error").
 */
export async function monitorWhile<T>(url: string, onCommand: (args: string[], atMs: number) => void, run: () => Promise<T>): Promise<T> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port || 6379), hostname || '127.0.0.1');
  try {
    await new Promise<void>((resolve, reject) => {
      let buffered = '';
      let on = false;
      socket.once('error', reject);
      socket.on('data', (chunk: Buffer) => {
        buffered += chunk.toString('utf8');
        const lines = buffered.split('\r\n');
        buffered = lines.pop() ?? '';
        for (const line of lines) {
          if (!on) {
            if (line !== '+OK') return reject(new Error(`MONITOR answered: ${line}`));
            on = true;
            resolve();
          } else onCommand(argsOf(line), Number(/^\+(\d+\.\d+)/.exec(line)?.[1]) * 1000);
        }
      });
      socket.write('MONITOR\r\n');
    });
    return await run();
  } finally {
    socket.destroy();
  }
}
