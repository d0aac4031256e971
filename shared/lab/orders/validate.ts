import { InvalidInputError } from '../../outbox/errors/invalid-input-error.js';

export const MAX_QTY = 1_000_000;
const SKU_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

function integer(raw: unknown): number | undefined {
  if (typeof raw === 'number') return Number.isSafeInteger(raw) ? raw : undefined;
  if (typeof raw === 'string' && /^\s*-?\d+\s*$/.test(raw)) {
    const value = Number(raw);
    return Number.isSafeInteger(value) ? value : undefined;
  }
  return undefined;
}

function show(raw: unknown): string {
  if (raw === undefined) return 'nothing';
  // JSON.parse reads 1e400 as Infinity, which JSON.stringify would show as null.
  if (typeof raw === 'number' && !Number.isFinite(raw)) return 'a number out of range';
  return JSON.stringify(raw);
}

export function parseQty(raw: unknown, name = 'qty'): number {
  const qty = integer(raw);
  if (qty === undefined || qty < 1 || qty > MAX_QTY) {
    throw new InvalidInputError(`${name} must be a whole number from 1 to ${MAX_QTY}, got ${show(raw)}`);
  }
  return qty;
}

export function parseSku(raw: unknown, name = 'sku'): string {
  if (typeof raw !== 'string' || !SKU_PATTERN.test(raw)) {
    throw new InvalidInputError(
      `${name} must be 1-64 characters of letters, digits, ".", "_" or "-" (starting with a letter or digit), got ${show(raw)}`,
    );
  }
  return raw;
}

export function parseOrderId(raw: unknown, name = 'id'): number {
  const id = integer(raw);
  if (id === undefined || id < 1) throw new InvalidInputError(`${name} must be a positive whole number, got ${show(raw)}`);
  return id;
}

export function parseCount(raw: unknown, name = 'count', max = 1_000_000): number {
  const count = integer(raw);
  if (count === undefined || count < 1 || count > max) {
    throw new InvalidInputError(`${name} must be a whole number from 1 to ${max}, got ${show(raw)}`);
  }
  return count;
}
