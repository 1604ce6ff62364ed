// Package streams runs a topology on Kafka: New checks a Config and returns
// an App; Run joins the application's consumer group and processes until
// its context is cancelled. Start more instances (processes, or Apps with
// their own StateDir) to scale out.
//
//	app, err := streams.New(top, streams.Config{
//		ApplicationID:    "wordcount",
//		BootstrapServers: "localhost:9092",
//		Guarantee:        streams.ExactlyOnce,
//	})
//	if err != nil {
//		return err
//	}
//	http.Handle("/eddy/", http.StripPrefix("/eddy", app.Handler()))
//	return app.Run(ctx)
//
// The App also answers interactive queries of its state stores
// (KeyValueStoreOf, WindowStoreOf, SessionStoreOf, MetadataForKey), serves
// health, readiness, metrics and its topology (Handler), and reports its
// lifecycle state (State, Config.StateListener). Records that fail go to
// the error handlers of Config (fail, continue, or dead-letter). Broker
// outages are waited out: the App retries and heals by itself.
package streams
