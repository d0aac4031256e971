import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { seededRandom } from '../shared/lab/random.js';
import { deck } from '../shared/tooling/chaos/scale-out-chaos.js';

describe('the scale-out chaos run deals its faults from a deck', () => {
  it('every target comes once in each round of as many faults as there are targets, in an order the seed fixes', () => {
    const targets = ['relay', 'consumer', 'cluster-node', 'cluster-node-wipe'];
    const deal = (seed: number, n: number) => {
      const cards = deck(targets, seededRandom(seed));
      return Array.from({ length: n }, () => cards.deal());
    };
    const dealt = deal(3, 12);
    for (let round = 0; round < 3; round += 1) assert.deepEqual([...dealt.slice(4 * round, 4 * round + 4)].sort(), [...targets].sort(), `round ${round}: ${dealt.join(',')}`);
    assert.deepEqual(deal(3, 12), dealt, 'the same seed deals the same order');
    const orders = new Set(Array.from({ length: 20 }, (_, seed) => deal(seed, 4).join(',')));
    assert.ok(orders.size > 1, 'the order follows the seed');
    // A target that found no process to kill is put back: it is dealt next, and its round still has every target.
    const cards = deck(targets, seededRandom(3));
    const first = cards.deal();
    cards.putBack(first);
    const round = [cards.deal(), cards.deal(), cards.deal(), cards.deal()];
    assert.equal(round[0], first);
    assert.deepEqual([...round].sort(), [...targets].sort());
  });
});
