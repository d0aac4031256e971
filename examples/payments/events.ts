import { z } from 'zod';
import { defineEvents } from 'outbox';

/** The payments service's events: an account's money moving, in cents. */
export const paymentEvents = defineEvents({
  PaymentCaptured: { aggregate: 'account', payload: z.object({ paymentId: z.string().min(1), amountCents: z.number().int().positive() }) },
  PaymentRefunded: { aggregate: 'account', payload: z.object({ paymentId: z.string().min(1), amountCents: z.number().int().positive() }) },
});
