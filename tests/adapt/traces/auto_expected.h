/* auto_expected.h: the decision runs and the reasons (of the changes) of the recorded AUTO
 * traces: {first iteration, level, CF sent, floor, candidate}; printed by ADAPT_DUMP=1
 * test_adapt_auto_trace and checked against each run's decision log (its obs.csv's next_cf).
 * Recorded with the probe budget counted over the phase (docs/adapt.md section 4.1); the MLP's
 * re-recorded with the predicted timing stop. */
/* MLP at 100 Mbit/s, 1000 iterations: timing 1000 -> 30 (CF 10, predicted from CF 30 and
 * CF 100, already scores 1.5x the best: not timed), start at 100 (prior), a probe of 30, the
 * guard at 200 (10), two probes of 4 in 550 iterations (the phase's probe budget: CF 4 costs 3x
 * CF 10 here), the lr drop at 750 (4), probes of 10; at 810, after the first sandwich of the
 * phase (z -0.43), CF 10, faster, scores 0.44x CF 4's and takes the incumbent back (since
 * 2026-11-29) where the run probed it again; the replay departs at 831, where the run went back
 * to CF 4 (it kept CF 4 to the end) */
static const struct run mlp_runs[] = {
    {0, F, 1000, 1000, 1000}, {3, F, 300, 300, 300}, {6, F, 100, 100, 100},   {9, F, 30, 30, 30},
    {12, F, 100, 100, 100},   {92, F, 30, 30, 30},   {112, F, 100, 100, 100}, {200, F, 10, 10, 10},
    {380, F, 4, 4, 4},        {400, F, 10, 10, 10},  {605, F, 4, 4, 4},       {625, F, 10, 10, 10},
    {751, F, 4, 4, 4},        {771, F, 10, 10, 10},  {791, F, 4, 4, 4},       {811, F, 10, 10, 10},
};
static const char *const mlp_reasons[] = {"start", "quality-guard", "lr-drop", "score-above", NULL};
/* the char-LSTM at 100 Mbit/s, 600 iterations: the whole ladder timed down to dense, start at
 * 30 (prior), probes of 100 and 10, the guard at 120 (10), probes of 4 within the budget, the
 * lr drop at 450 (4), probes of 10; at 510, the first sandwich of the phase inconclusive (z 0.07),
 * CF 10 (score 0.86x CF 4's) takes the incumbent back (since 2026-11-29) where the run probed it
 * again; the replay departs at 531, where the run went back to CF 4 */
static const struct run lstm_runs[] = {
    {0, F, 1000, 1000, 1000}, {3, F, 300, 300, 300},  {6, F, 100, 100, 100}, {9, F, 30, 30, 30},
    {12, F, 10, 10, 10},      {15, F, 4, 4, 4},       {18, D, 2, 4, 4},      {21, D, 1, 4, 4},
    {24, F, 30, 30, 30},      {44, F, 100, 100, 100}, {64, F, 30, 30, 30},   {84, F, 10, 10, 10},
    {104, F, 30, 30, 30},     {120, F, 10, 10, 10},   {200, F, 4, 4, 4},     {220, F, 10, 10, 10},
    {297, F, 4, 4, 4},        {317, F, 10, 10, 10},   {431, F, 4, 4, 4},     {471, F, 10, 10, 10},
    {491, F, 4, 4, 4},        {511, F, 10, 10, 10},
};
static const char *const lstm_reasons[] = {"start", "quality-guard", "lr-drop", "score-above",
                                           NULL};
/* the MLP at 1 Gbit/s, recorded before the start was re-scored (the first 400 of 1000
 * iterations): timing 1000 -> dense in full, start at 4 (timed at 6.4 ms against CF 10's 6.0),
 * probes of 10 (running at 4.9-6.1 ms against CF 4's 7.4-9.3) and of dense in halves; the
 * evidence leans to CF 4 (z 1.2-1.9) and never decides. At 341, the pair's z down to 0.18,
 * CF 10's score is 0.85x CF 4's and it becomes the incumbent, where the run only probed it: the
 * replay departs at 367, when the run went back to CF 4 (it kept CF 4 to the end of the job,
 * 6.1 s to 87 % against static-10's 4.2) */
static const struct run mlp1g_runs[] = {
    {0, F, 1000, 1000, 1000}, {3, F, 300, 300, 300}, {6, F, 100, 100, 100}, {9, F, 30, 30, 30},
    {12, F, 10, 10, 10},      {15, F, 4, 4, 4},      {18, D, 2, 4, 4},      {21, D, 1, 4, 4},
    {24, F, 4, 4, 4},         {44, F, 10, 10, 10},   {64, F, 4, 4, 4},      {84, F, 10, 10, 10},
    {104, F, 4, 4, 4},        {124, D, 2, 4, 4},     {144, F, 4, 4, 4},     {164, F, 10, 10, 10},
    {184, F, 4, 4, 4},        {204, F, 10, 10, 10},  {224, F, 4, 4, 4},     {245, F, 10, 10, 10},
    {265, F, 4, 4, 4},        {291, F, 10, 10, 10},  {313, F, 4, 4, 4},     {341, F, 10, 10, 10},
};
static const char *const mlp1g_reasons[] = {"start", "score-above", NULL};
/* the MLP at 100 Mbit/s, seed 6 (2026-11-29), recorded before an incumbent slower than its
 * neighbour had to keep its evidence: start at 30 (prior), probes of 100, the guard at 200 (10),
 * one sandwich of CF 4 (rates -0.44 and -0.17 for CF 10 around 0.14 for CF 4, z 2.5) and CF 4,
 * 3x CF 10's time, is the incumbent at 367; the run kept it to the end of the job (16.1 s to 87 %
 * against static-10's 9.2-9.6 s in the seeds around it). Replayed, the evidence holds at the next
 * sandwich (z 2.04 at 427) and decays at the one after: at 492, its z for CF 4 at 0.69, CF 10
 * (score 0.42x CF 4's) takes the incumbent back where the run only probed it; the replay departs
 * at 523, where the run went back to CF 4 */
static const struct run mlp_s6_runs[] = {
    {0, F, 1000, 1000, 1000}, {3, F, 300, 300, 300}, {6, F, 100, 100, 100},   {9, F, 30, 30, 30},
    {12, F, 10, 10, 10},      {15, F, 30, 30, 30},   {75, F, 100, 100, 100},  {95, F, 30, 30, 30},
    {135, F, 100, 100, 100},  {155, F, 30, 30, 30},  {175, F, 100, 100, 100}, {195, F, 30, 30, 30},
    {200, F, 10, 10, 10},     {320, F, 4, 4, 4},     {340, F, 10, 10, 10},    {368, F, 4, 4, 4},
    {388, F, 10, 10, 10},     {408, F, 4, 4, 4},     {448, F, 10, 10, 10},    {473, F, 4, 4, 4},
    {493, F, 10, 10, 10},
};
static const char *const mlp_s6_reasons[] = {"start", "quality-guard", "evidence-below",
                                             "score-above", NULL};
static const struct expect expected[] = {
    {"mlp-100mbit", mlp_runs, GV_ARRAY_LEN(mlp_runs), mlp_reasons, 831},
    {"lstm-100mbit", lstm_runs, GV_ARRAY_LEN(lstm_runs), lstm_reasons, 531},
    {"mlp-1gbit-cf4", mlp1g_runs, GV_ARRAY_LEN(mlp1g_runs), mlp1g_reasons, 367},
    {"mlp-100mbit-s6", mlp_s6_runs, GV_ARRAY_LEN(mlp_s6_runs), mlp_s6_reasons, 523},
};
