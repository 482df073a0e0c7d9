/* auto_expected.h: the decision runs and the reasons (of the changes) of the recorded AUTO
 * traces: {first iteration, level, CF sent, floor, candidate}; printed by ADAPT_DUMP=1
 * test_adapt_auto_trace and checked against each run's decision log. */
/* MLP at 100 Mbit/s, 1000 iterations: timing 1000 -> 30, start at 100 (prior),
 * probes of 300 and 30, CF 30 as fast as 100 (151), the guard at 200 (10), probes of 4, the lr
 * drop at 750 (4), probes of 10 and of dense in halves */
static const struct run mlp_runs[] = {
    {0, F, 1000, 1000, 1000}, {3, F, 300, 300, 300},  {6, F, 100, 100, 100},  {9, F, 30, 30, 30},
    {12, F, 100, 100, 100},   {32, F, 300, 300, 300}, {52, F, 100, 100, 100}, {132, F, 30, 30, 30},
    {172, F, 100, 100, 100},  {192, F, 30, 30, 30},   {200, F, 10, 10, 10},   {260, F, 4, 4, 4},
    {280, F, 10, 10, 10},     {322, F, 4, 4, 4},      {342, F, 10, 10, 10},   {364, F, 4, 4, 4},
    {384, F, 10, 10, 10},     {418, F, 4, 4, 4},      {438, F, 10, 10, 10},   {478, F, 4, 4, 4},
    {498, F, 10, 10, 10},     {548, F, 4, 4, 4},      {568, F, 10, 10, 10},   {621, F, 4, 4, 4},
    {641, F, 10, 10, 10},     {720, F, 4, 4, 4},      {740, F, 10, 10, 10},   {751, F, 4, 4, 4},
    {771, F, 10, 10, 10},     {791, F, 4, 4, 4},      {811, F, 10, 10, 10},   {831, F, 4, 4, 4},
    {851, F, 10, 10, 10},     {871, F, 4, 4, 4},      {891, F, 10, 10, 10},   {911, F, 4, 4, 4},
    {931, D, 2, 4, 4},        {951, F, 4, 4, 4},      {971, F, 10, 10, 10},   {993, F, 4, 4, 4},
};
static const char *const mlp_reasons[] = {"start", "as-fast-below", "quality-guard", "lr-drop",
                                          NULL};
/* the char-LSTM at 100 Mbit/s, 600 iterations (compute-bound): the whole ladder timed
 * down to dense, start at 4 (prior), probes of 10 and of dense in halves, the lr drop at 450 (4
 * stays: not onto a dense arm), dense in halves as fast as 4 (590) */
static const struct run lstm_runs[] = {
    {0, F, 1000, 1000, 1000}, {3, F, 300, 300, 300}, {6, F, 100, 100, 100}, {9, F, 30, 30, 30},
    {12, F, 10, 10, 10},      {15, F, 4, 4, 4},      {18, D, 2, 4, 4},      {21, D, 1, 4, 4},
    {24, F, 4, 4, 4},         {64, F, 10, 10, 10},   {84, F, 4, 4, 4},      {104, D, 2, 4, 4},
    {124, F, 4, 4, 4},        {144, F, 10, 10, 10},  {164, F, 4, 4, 4},     {184, D, 2, 4, 4},
    {204, F, 4, 4, 4},        {224, F, 10, 10, 10},  {244, F, 4, 4, 4},     {270, D, 2, 4, 4},
    {290, F, 4, 4, 4},        {323, D, 2, 4, 4},     {343, F, 4, 4, 4},     {368, F, 10, 10, 10},
    {401, F, 4, 4, 4},        {471, F, 10, 10, 10},  {491, F, 4, 4, 4},     {531, F, 10, 10, 10},
    {551, F, 4, 4, 4},        {571, D, 2, 4, 4},
};
static const char *const lstm_reasons[] = {"start", "lr-drop", "as-fast-below", NULL};
static const struct expect expected[] = {
    {"mlp-100mbit", mlp_runs, GV_ARRAY_LEN(mlp_runs), mlp_reasons},
    {"lstm-100mbit", lstm_runs, GV_ARRAY_LEN(lstm_runs), lstm_reasons},
};
