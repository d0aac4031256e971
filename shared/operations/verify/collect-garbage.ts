import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

let gc: (() => void) | undefined;

/**
 * A full garbage collection, now. verify streams a history through memory a chunk at a time, and
 * V8 left alone lets the heap grow with the garbage before it collects, so the process's peak RSS
 * would depend on when it chose to: collecting every few hundred chunks keeps the peak at what a few
 * hundred chunks hold, over any history (a few ms each time).
 */
export function collectGarbage(): void {
  if (gc === undefined) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  gc();
}
