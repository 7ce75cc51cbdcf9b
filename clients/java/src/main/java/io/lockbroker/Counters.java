package io.lockbroker;

/**
 * A snapshot of a client's counters ({@link LockClient#counters()}). Every lockbroker library has the
 * same ones, under the same names in its own style. Each only goes up, from 0 when the client was
 * made; a rate or an average is the difference of two snapshots.
 *
 * @param waits takes of a key that ended, whatever their outcome: {@code lock}, {@code tryLock},
 *     {@code lockAsync}, {@code acquire} (a thread taking again a key it holds is no take)
 * @param waitSecondsTotal the time those takes lasted, from the call to the outcome
 * @param holds holds that ended: released, lost, or ended with the client
 * @param holdSecondsTotal the time those holds lasted, from the grant to their end
 * @param losses holds lost ({@link LockLostException}: the broker said so, or the session that held
 *     them ended)
 * @param resumes sessions resumed after a dropped connection (holds and tokens kept)
 * @param reconnects connections made again after one dropped: the resumes, and new sessions that took
 *     the place of one that could not be resumed
 */
public record Counters(long waits, double waitSecondsTotal, long holds, double holdSecondsTotal, long losses,
        long resumes, long reconnects) {
}
