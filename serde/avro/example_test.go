package avro_test

import (
	"fmt"

	"github.com/riferrei/srclient"

	"github.com/eddy-go/eddy/serde/avro"
)

// A typed serde: Go struct in, Confluent wire format out, and back. A real
// application uses avro.NewRegistry with the registry's URL.
func Example() {
	type Temperature struct {
		Sensor  string  `avro:"sensor"`
		Celsius float64 `avro:"celsius"`
	}
	reg := avro.NewRegistryWithClient(srclient.CreateMockSchemaRegistryClient("mock://"))
	s, err := avro.New[Temperature](reg, `{"type":"record","name":"Temperature","fields":[
		{"name":"sensor","type":"string"},{"name":"celsius","type":"double"}]}`)
	if err != nil {
		panic(err)
	}
	b, _ := s.Serialize("temperatures", Temperature{"kitchen", 21.5})
	fmt.Printf("magic %d, schema id %d, subject %s\n", b[0], int(b[4]), s.Subject("temperatures"))
	t, _ := s.Deserialize("temperatures", b)
	fmt.Printf("%+v\n", t)
	// Output:
	// magic 0, schema id 1, subject temperatures-value
	// {Sensor:kitchen Celsius:21.5}
}
